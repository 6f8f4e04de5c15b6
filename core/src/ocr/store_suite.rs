//! The OCR context's store suite: every storage adapter runs it on its implementation of
//! [`super::ports::Tx`] (with the kernel's `crate::storage::suite`).

use super::blobs::{BlobError, BlobId, BlobStore};
use super::engine::Language;
use super::intake::DocumentKind;
use super::model::{Document, DocumentState, OcrId, Profile};
use super::ports::Store;
use crate::kernel::{Page, Timestamp};
use crate::storage::{StoreError, in_write};
use std::sync::Arc;

pub type Factory<'a> = &'a dyn Fn() -> Arc<Store>;

pub fn run_all(fresh: Factory<'_>) {
    suppliers_zones_and_usage_accumulate(&*fresh());
    documents_are_found_listed_and_deleted_with_their_files_named(&*fresh());
    maintenance_and_software_records_round_trip(&*fresh());
    a_duplicate_supplier_or_software_leaves_the_transaction_usable(&*fresh());
}

fn document(owner: crate::access::model::UserId, blob: &[u8], state: DocumentState, secs: i64) -> Document {
    Document {
        ocr_id: OcrId::generate(),
        owner,
        blob: BlobId::of(blob),
        kind: DocumentKind::Pdf,
        size_bytes: 1234,
        pages: 2,
        lang: Language::French,
        profile: Profile::Invoice,
        state,
        text: "Facture n° 1\u{c}page 2".into(),
        created_at: Timestamp::from_unix_secs(1_700_000_000 + secs),
        meta: serde_json::json!({"b": 1, "a": [true, "x"]}),
    }
}

fn fields(name: &str) -> super::model::SoftwareFields {
    super::model::SoftwareFields {
        name: name.into(),
        latest_version: "2.1".into(),
        min_version: "1.0".into(),
        download_url: String::new(),
        notes: "line one\nline two".into(),
    }
}

fn user(tx: &mut dyn super::ports::Tx, address: &str) -> Result<crate::access::model::UserId, StoreError> {
    let email = crate::kernel::EmailAddress::parse(address).unwrap();
    tx.insert_user(&email, &crate::access::model::Profile::default(), None, Timestamp::from_unix_secs(1))
}

pub fn documents_are_found_listed_and_deleted_with_their_files_named(store: &Store) {
    in_write(store, |tx| {
        let (ann, bob) = (user(tx, "ann@example.org")?, user(tx, "bob@example.org")?);
        let first = document(ann, b"one", DocumentState::Recognized, 0);
        let mut second = document(ann, b"two", DocumentState::Failed, 10);
        second.meta = serde_json::Value::String(String::new());
        second.kind = DocumentKind::Xml;
        let shared = document(bob, b"one", DocumentState::Recognized, 20);
        for d in [&first, &second, &shared] {
            tx.insert_ocr_document(d)?;
        }
        let read = tx.ocr_document(&first.ocr_id)?.expect("stored");
        assert_eq!(
            (read.owner, read.kind, read.size_bytes, read.pages, read.lang, read.profile, read.state),
            (ann, DocumentKind::Pdf, 1234, 2, Language::French, Profile::Invoice, DocumentState::Recognized)
        );
        assert_eq!(
            (read.text.as_str(), read.created_at, &read.meta),
            (first.text.as_str(), first.created_at, &first.meta)
        );
        assert_eq!(
            tx.ocr_document(&second.ocr_id)?.map(|d| (d.kind, d.meta)),
            Some((DocumentKind::Xml, second.meta.clone()))
        );
        assert_eq!(tx.ocr_document(&OcrId::generate())?.map(|d| d.ocr_id), None);
        let recognized = tx.ocr_documents_in_state(DocumentState::Recognized, Page::default())?;
        assert_eq!(recognized.total, 2);
        assert_eq!(
            recognized.items.iter().map(|d| d.ocr_id.clone()).collect::<Vec<_>>(),
            [shared.ocr_id.clone(), first.ocr_id.clone()],
            "newest first"
        );
        // Retention: the oldest first, up to the limit; the file each named.
        assert_eq!(tx.delete_ocr_documents_before(Timestamp::from_unix_secs(1_700_000_015), 1)?, [BlobId::of(b"one")]);
        assert!(tx.ocr_blob_in_use(&BlobId::of(b"one"))?, "bob's document names the same file");
        assert_eq!(tx.ocr_document(&first.ocr_id)?.map(|d| d.ocr_id), None);
        tx.add_ocr_usage(bob, "2026-11", &crate::ocr::usage::MonthUsage::default())?;
        tx.set_ocr_plan(bob, Some(3))?;
        assert_eq!(tx.delete_ocr_user_records(bob)?, [BlobId::of(b"one")]);
        assert!(!tx.ocr_blob_in_use(&BlobId::of(b"one"))?);
        assert!(tx.ocr_usage_of(bob)?.is_empty() && tx.ocr_plan(bob)?.is_none(), "usage and plan went too");
        assert!(tx.ocr_blob_in_use(&BlobId::of(b"two"))?, "ann's other document stays");
        Ok::<_, StoreError>(())
    })
    .unwrap();
}

pub fn maintenance_and_software_records_round_trip(store: &Store) {
    use super::model::{Maintenance, Software, SoftwareId};
    let since = Timestamp::from_unix_secs(1_700_000_000);
    in_write(store, |tx| {
        assert_eq!(tx.ocr_maintenance()?, Maintenance::Off);
        tx.set_ocr_maintenance(Maintenance::On { since })?;
        tx.set_ocr_maintenance(Maintenance::On { since: since.plus_secs(5) })?;
        assert_eq!(tx.ocr_maintenance()?, Maintenance::On { since: since.plus_secs(5) });
        tx.set_ocr_maintenance(Maintenance::Off)?;
        assert_eq!(tx.ocr_maintenance()?, Maintenance::Off);
        let record = |id: &str, name: &str| Software {
            id: SoftwareId::parse(id).unwrap(),
            fields: fields(name),
            created_at: since,
            updated_at: since,
        };
        tx.insert_software(&record("b-app", "B"))?;
        tx.insert_software(&record("Z", "Z"))?;
        tx.insert_software(&record("a-app", "A"))?;
        let mut changed = record("b-app", "B2");
        changed.updated_at = since.plus_secs(1);
        tx.update_software(&changed)?;
        assert_eq!(
            tx.software(&changed.id)?.map(|s| (s.fields.name, s.updated_at)),
            Some(("B2".into(), since.plus_secs(1)))
        );
        let ids = |tx: &mut dyn super::ports::Tx| -> Result<Vec<String>, StoreError> {
            Ok(tx.software_list()?.into_iter().map(|s| s.id.as_str().to_owned()).collect())
        };
        assert_eq!(ids(tx)?, ["Z", "a-app", "b-app"], "by id, bytewise");
        assert!(tx.delete_software(&changed.id)?);
        assert!(!tx.delete_software(&changed.id)?, "already gone");
        assert_eq!(ids(tx)?, ["Z", "a-app"]);
        Ok::<_, StoreError>(())
    })
    .unwrap();
}

pub fn a_duplicate_supplier_or_software_leaves_the_transaction_usable(store: &Store) {
    use super::model::{Software, SoftwareId, Source, Supplier, SupplierId, VatNumber};
    let now = Timestamp::from_unix_secs(1_700_000_000);
    let supplier = Supplier {
        id: SupplierId::from_stored(0),
        vat_number: Some(VatNumber::parse("FR40303265045").unwrap()),
        name: "ACME".into(),
        siret: String::new(),
        siren: String::new(),
        adresse: String::new(),
        cp: String::new(),
        ville: String::new(),
        pays: String::new(),
        code_pays: String::new(),
        source: Source::Invoice,
        created_at: now,
        updated_at: now,
    };
    let software =
        Software { id: SoftwareId::parse("app").unwrap(), fields: fields("App"), created_at: now, updated_at: now };
    in_write(store, |tx| {
        let id = tx.insert_supplier(&supplier)?;
        assert_eq!(tx.insert_supplier(&supplier).err(), Some(StoreError::Duplicate));
        tx.insert_software(&software)?;
        assert_eq!(tx.insert_software(&software).err(), Some(StoreError::Duplicate));
        // The transaction goes on and commits what came before the refusals.
        tx.confirm_supplier_zone(
            id,
            &super::model::LearnedZone {
                name: "total".into(),
                page: 1,
                rect: super::model::PixelRect { x: 1, y: 2, w: 3, h: 4 },
                confirmations: 1,
                last_value: "v".into(),
                updated_at: now,
            },
        )?;
        Ok::<_, StoreError>(())
    })
    .unwrap();
    crate::storage::in_read(store, |tx| {
        assert_eq!(tx.supplier_by_vat(supplier.vat_number.as_ref().unwrap())?.map(|s| s.name), Some("ACME".into()));
        assert_eq!(tx.software_list()?.len(), 1);
        let id = tx.supplier_by_name("acme")?.unwrap().id;
        assert_eq!(tx.supplier_zones(id)?.len(), 1);
        Ok::<_, StoreError>(())
    })
    .unwrap();
}

pub fn suppliers_zones_and_usage_accumulate(store: &Store) {
    use crate::access::model::Profile;
    use crate::kernel::EmailAddress;
    use crate::ocr::cuts::LearnedZone;
    use crate::ocr::suppliers::{self, Facts, Source, VatNumber};
    use crate::ocr::usage::MonthUsage;
    use crate::ocr::zones::PixelRect;
    let now = Timestamp::from_unix_secs(1_700_000_000);
    let vat = VatNumber::parse("FR40303265045").unwrap();
    in_write(store, |tx| {
        let user = tx.insert_user(&EmailAddress::parse("u@example.org").unwrap(), &Profile::default(), None, now)?;
        let facts = Facts { vat_number: Some(vat.clone()), name: Some("ACME".into()), ..Facts::default() };
        let s = suppliers::learn(tx, &facts, Source::Invoice, now)?.expect("identified");
        // Found again by number and by folded name; a later extraction does not rename it.
        let again = Facts { vat_number: Some(vat.clone()), name: Some("Misread".into()), ..Facts::default() };
        assert_eq!(
            suppliers::learn(tx, &again, Source::Invoice, now)?.map(|x| (x.id, x.name)),
            Some((s.id, "ACME".into()))
        );
        assert_eq!(tx.supplier_by_name("acme")?.map(|x| x.id), Some(s.id));
        let zone = |name: &str, x| LearnedZone {
            name: name.into(),
            page: 1,
            rect: PixelRect { x, y: 2, w: 3, h: 4 },
            confirmations: 1,
            last_value: "v".into(),
            updated_at: now,
        };
        tx.confirm_supplier_zone(s.id, &zone("total", 1))?;
        tx.confirm_supplier_zone(s.id, &zone("date", 1))?;
        tx.confirm_supplier_zone(s.id, &zone("total", 9))?;
        let zones = tx.supplier_zones(s.id)?;
        assert_eq!(
            zones.iter().map(|z| (z.name.as_str(), z.confirmations, z.rect.x)).collect::<Vec<_>>(),
            [("total", 2, 9), ("date", 1, 1)]
        );
        let d = |documents, pages, cuts| MonthUsage { month: String::new(), documents, pages, cuts };
        tx.add_ocr_usage(user, "2026-10", &d(1, 3, 0))?;
        tx.add_ocr_usage(user, "2026-11", &d(1, 2, 0))?;
        tx.add_ocr_usage(user, "2026-11", &d(0, 0, 5))?;
        let months = tx.ocr_usage_of(user)?;
        assert_eq!(
            months.iter().map(|m| (m.month.as_str(), m.documents, m.pages, m.cuts)).collect::<Vec<_>>(),
            [("2026-11", 1, 2, 5), ("2026-10", 1, 3, 0)]
        );
        tx.set_ocr_plan(user, Some(10))?;
        assert_eq!(tx.ocr_plan(user)?, Some(10));
        tx.set_ocr_plan(user, None)?;
        assert_eq!(tx.ocr_plan(user)?, None);
        Ok::<_, StoreError>(())
    })
    .unwrap();
}

/// The document store port's contract, for each of its adapters (a directory, a database).
pub fn blob_store_keeps_content_by_its_hash(blobs: &dyn BlobStore) {
    blobs.ready().unwrap();
    let bytes: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    let id = blobs.put(&bytes).unwrap();
    assert_eq!(id, BlobId::of(&bytes));
    assert_eq!(blobs.put(&bytes).unwrap(), id, "the same content is stored once, under one name");
    assert_eq!(blobs.get(&id).unwrap(), bytes, "every byte back, zeros included");
    let empty = blobs.put(b"").unwrap();
    assert_eq!(blobs.get(&empty).unwrap(), b"");
    blobs.delete(&id).unwrap();
    assert!(matches!(blobs.get(&id), Err(BlobError::Missing(name)) if name == id.as_str()));
    blobs.delete(&id).expect("deleting a file already gone is not an error");
    assert_eq!(blobs.get(&empty).unwrap(), b"", "the other stays");
}
