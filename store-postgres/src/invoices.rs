//! Invoices on PostgreSQL (`ocr::ports::InvoiceRepo`): the supplier directory, learned zones,
//! usage and plans, client software records.

use super::{PgTx, corrupt, get};
use courrier_core::access::model::UserId;
use courrier_core::kernel::Timestamp;
use courrier_core::ocr::model::{
    LearnedZone, MonthUsage, PixelRect, Software, SoftwareFields, SoftwareId, Source, Supplier, SupplierId, VatNumber,
};
use courrier_core::ocr::ports::InvoiceRepo;
use courrier_core::ocr::suppliers::name_key;
use courrier_core::storage::StoreError;
use postgres::Row;

const SUPPLIER_COLUMNS: &str =
    "id, vat_number, name, siret, siren, adresse, cp, ville, pays, code_pays, source, created_at, updated_at";
const SOFTWARE_COLUMNS: &str = "id, name, latest_version, min_version, download_url, notes, created_at, updated_at";

fn supplier_row(r: &Row) -> Result<Supplier, StoreError> {
    let vat: Option<String> = get(r, 1)?;
    let source: String = get(r, 10)?;
    Ok(Supplier {
        id: SupplierId::from_stored(get(r, 0)?),
        vat_number: match vat {
            Some(v) => Some(VatNumber::parse(&v).ok_or_else(|| corrupt("VAT number", &v))?),
            None => None,
        },
        name: get(r, 2)?,
        siret: get(r, 3)?,
        siren: get(r, 4)?,
        adresse: get(r, 5)?,
        cp: get(r, 6)?,
        ville: get(r, 7)?,
        pays: get(r, 8)?,
        code_pays: get(r, 9)?,
        source: Source::parse(&source).ok_or_else(|| corrupt("supplier source", &source))?,
        created_at: Timestamp::from_unix_micros(get(r, 11)?),
        updated_at: Timestamp::from_unix_micros(get(r, 12)?),
    })
}

fn zone_row(r: &Row) -> Result<LearnedZone, StoreError> {
    let n = |i: usize| -> Result<u32, StoreError> {
        get::<i64>(r, i)?.try_into().map_err(|_| corrupt("zone", "out of range"))
    };
    Ok(LearnedZone {
        name: get(r, 0)?,
        page: n(1)?,
        rect: PixelRect { x: n(2)?, y: n(3)?, w: n(4)?, h: n(5)? },
        confirmations: n(6)?,
        last_value: get(r, 7)?,
        updated_at: Timestamp::from_unix_micros(get(r, 8)?),
    })
}

fn software_row(r: &Row) -> Result<Software, StoreError> {
    let id: String = get(r, 0)?;
    Ok(Software {
        id: SoftwareId::parse(&id).map_err(|_| corrupt("software id", &id))?,
        fields: SoftwareFields {
            name: get(r, 1)?,
            latest_version: get(r, 2)?,
            min_version: get(r, 3)?,
            download_url: get(r, 4)?,
            notes: get(r, 5)?,
        },
        created_at: Timestamp::from_unix_micros(get(r, 6)?),
        updated_at: Timestamp::from_unix_micros(get(r, 7)?),
    })
}

impl PgTx {
    fn supplier_where(
        &mut self,
        clause: &str,
        arg: &(dyn postgres::types::ToSql + Sync),
    ) -> Result<Option<Supplier>, StoreError> {
        self.query_opt(&format!("SELECT {SUPPLIER_COLUMNS} FROM ocr_suppliers WHERE {clause}"), &[arg])?
            .as_ref()
            .map(supplier_row)
            .transpose()
    }
}

impl InvoiceRepo for PgTx {
    fn supplier_by_id(&mut self, id: SupplierId) -> Result<Option<Supplier>, StoreError> {
        self.supplier_where("id = $1", &id.get())
    }

    fn supplier_by_vat(&mut self, vat: &VatNumber) -> Result<Option<Supplier>, StoreError> {
        self.supplier_where("vat_number = $1", &vat.as_str())
    }

    fn supplier_by_name(&mut self, key: &str) -> Result<Option<Supplier>, StoreError> {
        self.supplier_where("name_key = $1 ORDER BY updated_at DESC, id DESC LIMIT 1", &key)
    }

    fn insert_supplier(&mut self, s: &Supplier) -> Result<SupplierId, StoreError> {
        let (vat, key) = (s.vat_number.as_ref().map(VatNumber::as_str), name_key(&s.name));
        let row = self.guarded(|tx| {
            tx.query_one(
                "INSERT INTO ocr_suppliers (vat_number, name, name_key, siret, siren, adresse, cp, ville, pays, \
                 code_pays, source, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id",
                &[
                    &vat,
                    &s.name,
                    &key,
                    &s.siret,
                    &s.siren,
                    &s.adresse,
                    &s.cp,
                    &s.ville,
                    &s.pays,
                    &s.code_pays,
                    &s.source.as_str(),
                    &s.created_at.unix_micros(),
                    &s.updated_at.unix_micros(),
                ],
            )
        })?;
        Ok(SupplierId::from_stored(get(&row, 0)?))
    }

    fn update_supplier(&mut self, s: &Supplier) -> Result<(), StoreError> {
        let (vat, key) = (s.vat_number.as_ref().map(VatNumber::as_str), name_key(&s.name));
        self.guarded(|tx| {
            tx.execute(
                "UPDATE ocr_suppliers SET vat_number = $2, name = $3, name_key = $4, siret = $5, siren = $6, \
                 adresse = $7, cp = $8, ville = $9, pays = $10, code_pays = $11, source = $12, updated_at = $13 \
                 WHERE id = $1",
                &[
                    &s.id.get(),
                    &vat,
                    &s.name,
                    &key,
                    &s.siret,
                    &s.siren,
                    &s.adresse,
                    &s.cp,
                    &s.ville,
                    &s.pays,
                    &s.code_pays,
                    &s.source.as_str(),
                    &s.updated_at.unix_micros(),
                ],
            )
        })
        .map(drop)
    }

    fn confirm_supplier_zone(&mut self, supplier: SupplierId, z: &LearnedZone) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO ocr_supplier_zones (supplier_id, name, page, x, y, w, h, confirmations, last_value, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9) \
             ON CONFLICT (supplier_id, name) DO UPDATE SET page = EXCLUDED.page, x = EXCLUDED.x, y = EXCLUDED.y, \
             w = EXCLUDED.w, h = EXCLUDED.h, confirmations = ocr_supplier_zones.confirmations + 1, \
             last_value = EXCLUDED.last_value, updated_at = EXCLUDED.updated_at",
            &[
                &supplier.get(),
                &z.name,
                &i64::from(z.page),
                &i64::from(z.rect.x),
                &i64::from(z.rect.y),
                &i64::from(z.rect.w),
                &i64::from(z.rect.h),
                &z.last_value,
                &z.updated_at.unix_micros(),
            ],
        )
        .map(drop)
    }

    fn supplier_zones(&mut self, supplier: SupplierId) -> Result<Vec<LearnedZone>, StoreError> {
        self.query(
            "SELECT name, page, x, y, w, h, confirmations, last_value, updated_at FROM ocr_supplier_zones \
             WHERE supplier_id = $1 ORDER BY confirmations DESC, name COLLATE \"C\"",
            &[&supplier.get()],
        )?
        .iter()
        .map(zone_row)
        .collect()
    }

    fn add_ocr_usage(&mut self, user: UserId, month: &str, d: &MonthUsage) -> Result<(), StoreError> {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.execute(
            "INSERT INTO ocr_usage (user_id, month, documents, pages, cuts) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (user_id, month) DO UPDATE SET documents = ocr_usage.documents + EXCLUDED.documents, \
             pages = ocr_usage.pages + EXCLUDED.pages, cuts = ocr_usage.cuts + EXCLUDED.cuts",
            &[&user.get(), &month, &n(d.documents), &n(d.pages), &n(d.cuts)],
        )
        .map(drop)
    }

    fn ocr_usage_of(&mut self, user: UserId) -> Result<Vec<MonthUsage>, StoreError> {
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        self.query(
            "SELECT month, documents, pages, cuts FROM ocr_usage WHERE user_id = $1 ORDER BY month COLLATE \"C\" DESC",
            &[&user.get()],
        )?
        .iter()
        .map(|r| {
            Ok(MonthUsage { month: get(r, 0)?, documents: n(get(r, 1)?), pages: n(get(r, 2)?), cuts: n(get(r, 3)?) })
        })
        .collect()
    }

    fn ocr_plan(&mut self, user: UserId) -> Result<Option<u32>, StoreError> {
        let row = self.query_opt("SELECT pages_per_month FROM ocr_plans WHERE user_id = $1", &[&user.get()])?;
        Ok(row.map(|r| get::<i64>(&r, 0)).transpose()?.map(|n| u32::try_from(n).unwrap_or(u32::MAX)))
    }

    fn set_ocr_plan(&mut self, user: UserId, pages: Option<u32>) -> Result<(), StoreError> {
        match pages {
            None => self.execute("DELETE FROM ocr_plans WHERE user_id = $1", &[&user.get()]),
            Some(n) => self.execute(
                "INSERT INTO ocr_plans (user_id, pages_per_month) VALUES ($1, $2) \
                 ON CONFLICT (user_id) DO UPDATE SET pages_per_month = EXCLUDED.pages_per_month",
                &[&user.get(), &i64::from(n)],
            ),
        }
        .map(drop)
    }

    fn software_list(&mut self) -> Result<Vec<Software>, StoreError> {
        self.query(&format!("SELECT {SOFTWARE_COLUMNS} FROM ocr_software ORDER BY id COLLATE \"C\""), &[])?
            .iter()
            .map(software_row)
            .collect()
    }

    fn software(&mut self, id: &SoftwareId) -> Result<Option<Software>, StoreError> {
        self.query_opt(&format!("SELECT {SOFTWARE_COLUMNS} FROM ocr_software WHERE id = $1"), &[&id.as_str()])?
            .as_ref()
            .map(software_row)
            .transpose()
    }

    fn insert_software(&mut self, s: &Software) -> Result<(), StoreError> {
        let f = &s.fields;
        self.guarded(|tx| {
            tx.execute(
                &format!("INSERT INTO ocr_software ({SOFTWARE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"),
                &[
                    &s.id.as_str(),
                    &f.name,
                    &f.latest_version,
                    &f.min_version,
                    &f.download_url,
                    &f.notes,
                    &s.created_at.unix_micros(),
                    &s.updated_at.unix_micros(),
                ],
            )
        })
        .map(drop)
    }

    fn update_software(&mut self, s: &Software) -> Result<(), StoreError> {
        let f = &s.fields;
        self.execute(
            "UPDATE ocr_software SET name = $2, latest_version = $3, min_version = $4, download_url = $5, \
             notes = $6, updated_at = $7 WHERE id = $1",
            &[
                &s.id.as_str(),
                &f.name,
                &f.latest_version,
                &f.min_version,
                &f.download_url,
                &f.notes,
                &s.updated_at.unix_micros(),
            ],
        )
        .map(drop)
    }

    fn delete_software(&mut self, id: &SoftwareId) -> Result<bool, StoreError> {
        Ok(self.execute("DELETE FROM ocr_software WHERE id = $1", &[&id.as_str()])? > 0)
    }
}
