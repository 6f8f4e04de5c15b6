//! The OCR context's store suite: every storage adapter runs it on its implementation of
//! [`super::ports::Tx`] (with the kernel's `crate::storage::suite`).

use super::ports::Store;
use crate::kernel::Timestamp;
use crate::storage::{StoreError, in_write};
use std::sync::Arc;

pub type Factory<'a> = &'a dyn Fn() -> Arc<Store>;

pub fn run_all(fresh: Factory<'_>) {
    suppliers_zones_and_usage_accumulate(&*fresh());
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
