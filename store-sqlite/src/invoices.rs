use super::{SqliteTx, map_err};
use courrier_core::access::model::UserId;
use courrier_core::kernel::Timestamp;
use courrier_core::ocr::model::{
    LearnedZone, MonthUsage, PixelRect, Software, SoftwareFields, SoftwareId, Source, Supplier, SupplierId, VatNumber,
};
use courrier_core::ocr::ports::InvoiceRepo;
use courrier_core::ocr::suppliers::name_key;
use courrier_core::storage::StoreError;
use rusqlite::{OptionalExtension, Row, params};

const SUPPLIER_COLUMNS: &str =
    "id, vat_number, name, siret, siren, adresse, cp, ville, pays, code_pays, source, created_at, updated_at";

fn corrupt(what: &str, value: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, format!("{what} {value:?}").into())
}

fn supplier_row(r: &Row<'_>) -> rusqlite::Result<Supplier> {
    let vat: Option<String> = r.get(1)?;
    let source: String = r.get(10)?;
    Ok(Supplier {
        id: SupplierId::from_stored(r.get(0)?),
        vat_number: match vat {
            Some(v) => Some(VatNumber::parse(&v).ok_or_else(|| corrupt("VAT number", &v))?),
            None => None,
        },
        name: r.get(2)?,
        siret: r.get(3)?,
        siren: r.get(4)?,
        adresse: r.get(5)?,
        cp: r.get(6)?,
        ville: r.get(7)?,
        pays: r.get(8)?,
        code_pays: r.get(9)?,
        source: Source::parse(&source).ok_or_else(|| corrupt("supplier source", &source))?,
        created_at: Timestamp::from_unix_micros(r.get(11)?),
        updated_at: Timestamp::from_unix_micros(r.get(12)?),
    })
}

fn zone_row(r: &Row<'_>) -> rusqlite::Result<LearnedZone> {
    let n = |i: usize| -> rusqlite::Result<u32> {
        r.get::<_, i64>(i)?.try_into().map_err(|_| corrupt("zone", "out of range"))
    };
    Ok(LearnedZone {
        name: r.get(0)?,
        page: n(1)?,
        rect: PixelRect { x: n(2)?, y: n(3)?, w: n(4)?, h: n(5)? },
        confirmations: n(6)?,
        last_value: r.get(7)?,
        updated_at: Timestamp::from_unix_micros(r.get(8)?),
    })
}

fn software_row(r: &Row<'_>) -> rusqlite::Result<Software> {
    let id: String = r.get(0)?;
    Ok(Software {
        id: SoftwareId::parse(&id).map_err(|_| corrupt("software id", &id))?,
        fields: SoftwareFields {
            name: r.get(1)?,
            latest_version: r.get(2)?,
            min_version: r.get(3)?,
            download_url: r.get(4)?,
            notes: r.get(5)?,
        },
        created_at: Timestamp::from_unix_micros(r.get(6)?),
        updated_at: Timestamp::from_unix_micros(r.get(7)?),
    })
}

const SOFTWARE_COLUMNS: &str = "id, name, latest_version, min_version, download_url, notes, created_at, updated_at";

impl SqliteTx {
    fn supplier_where(&mut self, clause: &str, arg: &dyn rusqlite::ToSql) -> Result<Option<Supplier>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {SUPPLIER_COLUMNS} FROM ocr_suppliers WHERE {clause}"))
            .and_then(|mut st| st.query_row([arg], supplier_row).optional())
            .map_err(map_err)
    }
}

impl InvoiceRepo for SqliteTx {
    fn supplier_by_id(&mut self, id: SupplierId) -> Result<Option<Supplier>, StoreError> {
        self.supplier_where("id = ?1", &id.get())
    }

    fn supplier_by_vat(&mut self, vat: &VatNumber) -> Result<Option<Supplier>, StoreError> {
        self.supplier_where("vat_number = ?1", &vat.as_str())
    }

    fn supplier_by_name(&mut self, key: &str) -> Result<Option<Supplier>, StoreError> {
        self.supplier_where("name_key = ?1 ORDER BY updated_at DESC, id DESC LIMIT 1", &key)
    }

    fn insert_supplier(&mut self, s: &Supplier) -> Result<SupplierId, StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO ocr_suppliers (vat_number, name, name_key, siret, siren, adresse, cp, ville, pays, \
                 code_pays, source, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    s.vat_number.as_ref().map(VatNumber::as_str),
                    s.name,
                    name_key(&s.name),
                    s.siret,
                    s.siren,
                    s.adresse,
                    s.cp,
                    s.ville,
                    s.pays,
                    s.code_pays,
                    s.source.as_str(),
                    s.created_at.unix_micros(),
                    s.updated_at.unix_micros(),
                ])
            })
            .map_err(map_err)?;
        Ok(SupplierId::from_stored(self.conn().last_insert_rowid()))
    }

    fn update_supplier(&mut self, s: &Supplier) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "UPDATE ocr_suppliers SET vat_number = ?2, name = ?3, name_key = ?4, siret = ?5, siren = ?6, \
                 adresse = ?7, cp = ?8, ville = ?9, pays = ?10, code_pays = ?11, source = ?12, updated_at = ?13 \
                 WHERE id = ?1",
            )
            .and_then(|mut st| {
                st.execute(params![
                    s.id.get(),
                    s.vat_number.as_ref().map(VatNumber::as_str),
                    s.name,
                    name_key(&s.name),
                    s.siret,
                    s.siren,
                    s.adresse,
                    s.cp,
                    s.ville,
                    s.pays,
                    s.code_pays,
                    s.source.as_str(),
                    s.updated_at.unix_micros(),
                ])
            })
            .map(drop)
            .map_err(map_err)
    }

    fn confirm_supplier_zone(&mut self, supplier: SupplierId, z: &LearnedZone) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO ocr_supplier_zones (supplier_id, name, page, x, y, w, h, confirmations, last_value, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8, ?9) \
                 ON CONFLICT (supplier_id, name) DO UPDATE SET page = excluded.page, x = excluded.x, y = excluded.y, \
                 w = excluded.w, h = excluded.h, confirmations = confirmations + 1, last_value = excluded.last_value, \
                 updated_at = excluded.updated_at",
            )
            .and_then(|mut st| {
                st.execute(params![
                    supplier.get(),
                    z.name,
                    i64::from(z.page),
                    i64::from(z.rect.x),
                    i64::from(z.rect.y),
                    i64::from(z.rect.w),
                    i64::from(z.rect.h),
                    z.last_value,
                    z.updated_at.unix_micros(),
                ])
            })
            .map(drop)
            .map_err(map_err)
    }

    fn supplier_zones(&mut self, supplier: SupplierId) -> Result<Vec<LearnedZone>, StoreError> {
        self.conn()
            .prepare_cached(
                "SELECT name, page, x, y, w, h, confirmations, last_value, updated_at FROM ocr_supplier_zones \
                 WHERE supplier_id = ?1 ORDER BY confirmations DESC, name",
            )
            .and_then(|mut st| st.query_map([supplier.get()], zone_row)?.collect())
            .map_err(map_err)
    }

    fn add_ocr_usage(&mut self, user: UserId, month: &str, d: &MonthUsage) -> Result<(), StoreError> {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.conn()
            .prepare_cached(
                "INSERT INTO ocr_usage (user_id, month, documents, pages, cuts) VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT (user_id, month) DO UPDATE SET documents = documents + excluded.documents, \
                 pages = pages + excluded.pages, cuts = cuts + excluded.cuts",
            )
            .and_then(|mut st| st.execute(params![user.get(), month, n(d.documents), n(d.pages), n(d.cuts)]))
            .map(drop)
            .map_err(map_err)
    }

    fn ocr_usage_of(&mut self, user: UserId) -> Result<Vec<MonthUsage>, StoreError> {
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        self.conn()
            .prepare_cached(
                "SELECT month, documents, pages, cuts FROM ocr_usage WHERE user_id = ?1 ORDER BY month DESC",
            )
            .and_then(|mut st| {
                st.query_map([user.get()], |r| {
                    Ok(MonthUsage {
                        month: r.get(0)?,
                        documents: n(r.get(1)?),
                        pages: n(r.get(2)?),
                        cuts: n(r.get(3)?),
                    })
                })?
                .collect()
            })
            .map_err(map_err)
    }

    fn ocr_plan(&mut self, user: UserId) -> Result<Option<u32>, StoreError> {
        self.conn()
            .prepare_cached("SELECT pages_per_month FROM ocr_plans WHERE user_id = ?1")
            .and_then(|mut st| st.query_row([user.get()], |r| r.get::<_, i64>(0)).optional())
            .map(|v| v.map(|n| u32::try_from(n).unwrap_or(u32::MAX)))
            .map_err(map_err)
    }

    fn set_ocr_plan(&mut self, user: UserId, pages: Option<u32>) -> Result<(), StoreError> {
        let result = match pages {
            None => self.conn().execute("DELETE FROM ocr_plans WHERE user_id = ?1", [user.get()]),
            Some(n) => self.conn().execute(
                "INSERT OR REPLACE INTO ocr_plans (user_id, pages_per_month) VALUES (?1, ?2)",
                params![user.get(), i64::from(n)],
            ),
        };
        result.map(drop).map_err(map_err)
    }

    fn software_list(&mut self) -> Result<Vec<Software>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {SOFTWARE_COLUMNS} FROM ocr_software ORDER BY id"))
            .and_then(|mut st| st.query_map([], software_row)?.collect())
            .map_err(map_err)
    }

    fn software(&mut self, id: &SoftwareId) -> Result<Option<Software>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {SOFTWARE_COLUMNS} FROM ocr_software WHERE id = ?1"))
            .and_then(|mut st| st.query_row([id.as_str()], software_row).optional())
            .map_err(map_err)
    }

    fn insert_software(&mut self, s: &Software) -> Result<(), StoreError> {
        let f = &s.fields;
        self.conn()
            .prepare_cached(&format!(
                "INSERT INTO ocr_software ({SOFTWARE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
            ))
            .and_then(|mut st| {
                st.execute(params![
                    s.id.as_str(),
                    f.name,
                    f.latest_version,
                    f.min_version,
                    f.download_url,
                    f.notes,
                    s.created_at.unix_micros(),
                    s.updated_at.unix_micros(),
                ])
            })
            .map(drop)
            .map_err(map_err)
    }

    fn update_software(&mut self, s: &Software) -> Result<(), StoreError> {
        let f = &s.fields;
        self.conn()
            .prepare_cached(
                "UPDATE ocr_software SET name = ?2, latest_version = ?3, min_version = ?4, download_url = ?5, \
                 notes = ?6, updated_at = ?7 WHERE id = ?1",
            )
            .and_then(|mut st| {
                st.execute(params![
                    s.id.as_str(),
                    f.name,
                    f.latest_version,
                    f.min_version,
                    f.download_url,
                    f.notes,
                    s.updated_at.unix_micros(),
                ])
            })
            .map(drop)
            .map_err(map_err)
    }

    fn delete_software(&mut self, id: &SoftwareId) -> Result<bool, StoreError> {
        self.conn().execute("DELETE FROM ocr_software WHERE id = ?1", [id.as_str()]).map(|n| n > 0).map_err(map_err)
    }
}
