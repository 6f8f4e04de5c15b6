//! The supplier directory: what processed invoices and users' confirmations taught about each
//! supplier (name, VAT number, SIRET, address), found again by id, VAT number or name. Shared by
//! every user, as the zones learned for a supplier are (decisions.md).

use super::Service;
pub use super::model::{Source, Supplier, SupplierId, VatNumber};
use crate::kernel::{Code, CoreError, Timestamp};
use crate::ocr::ports::Tx;
use crate::storage::{StoreError, in_read};

/// What one invoice or one confirmation says of its supplier.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub vat_number: Option<VatNumber>,
    pub name: Option<String>,
    pub siret: Option<String>,
    pub adresse: Option<String>,
    pub cp: Option<String>,
    pub ville: Option<String>,
    pub pays: Option<String>,
}

impl Facts {
    /// Enough to file a supplier under: a VAT number or a name.
    pub fn identifies(&self) -> bool {
        self.vat_number.is_some() || self.name.as_deref().is_some_and(|n| !name_key(n).is_empty())
    }
}

/// A name folded for lookups: lower case, runs of white space as one space.
pub fn name_key(name: &str) -> String {
    name.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

fn clean(s: &str, max: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(max).collect::<String>().trim().to_owned()
}

/// The supplier these facts are about: by VAT number first (the strongest key), else by name.
pub fn matching(tx: &mut dyn Tx, facts: &Facts) -> Result<Option<Supplier>, StoreError> {
    if let Some(vat) = &facts.vat_number
        && let Some(s) = tx.supplier_by_vat(vat)?
    {
        return Ok(Some(s));
    }
    match facts.name.as_deref().map(name_key) {
        Some(key) if !key.is_empty() => tx.supplier_by_name(&key),
        _ => Ok(None),
    }
}

/// Files what the facts say: a new supplier, or the known one completed. A confirmation
/// overwrites what an extraction said; an extraction only fills what is still empty, so a user's
/// word is never undone by the next misread scan.
pub fn learn(tx: &mut dyn Tx, facts: &Facts, source: Source, now: Timestamp) -> Result<Option<Supplier>, StoreError> {
    if !facts.identifies() {
        return Ok(None);
    }
    let existing = matching(tx, facts)?;
    let mut s = existing.clone().unwrap_or(Supplier {
        id: SupplierId::from_stored(0),
        vat_number: None,
        name: String::new(),
        siret: String::new(),
        siren: String::new(),
        adresse: String::new(),
        cp: String::new(),
        ville: String::new(),
        pays: String::new(),
        code_pays: String::new(),
        source,
        created_at: now,
        updated_at: now,
    });
    let overwrite = source == Source::Confirmation || existing.is_none();
    let set = |field: &mut String, value: &Option<String>, max: usize| {
        if let Some(v) = value.as_deref().map(|v| clean(v, max)).filter(|v| !v.is_empty())
            && (overwrite || field.is_empty())
        {
            *field = v;
        }
    };
    set(&mut s.name, &facts.name, 200);
    set(&mut s.siret, &facts.siret.as_ref().map(|v| v.replace(' ', "")), 14);
    set(&mut s.adresse, &facts.adresse, 300);
    set(&mut s.cp, &facts.cp, 20);
    set(&mut s.ville, &facts.ville, 100);
    set(&mut s.pays, &facts.pays, 100);
    if let Some(vat) = &facts.vat_number
        && (s.vat_number.is_none() || source == Source::Confirmation)
        // Another supplier may already hold this number: never file it twice.
        && tx.supplier_by_vat(vat)?.is_none_or(|other| other.id == s.id)
    {
        s.vat_number = Some(vat.clone());
    }
    if let Some(vat) = s.vat_number.clone() {
        s.code_pays = vat.country().to_owned();
        if s.siren.is_empty() {
            s.siren = vat.siren().map(str::to_owned).unwrap_or_default();
        }
        if s.pays.is_empty() {
            s.pays = country_name(&s.code_pays).to_owned();
        }
    }
    if s.siren.is_empty() && s.siret.len() == 14 {
        s.siren = s.siret[..9].to_owned();
    }
    if s.name.is_empty() {
        // Known by its number alone: the number is its name until someone says better.
        s.name = s.vat_number.as_ref().map(|v| v.as_str().to_owned()).unwrap_or_default();
    }
    s.source = source;
    s.updated_at = now;
    if existing.is_some() {
        tx.update_supplier(&s)?;
    } else {
        s.id = tx.insert_supplier(&s)?;
    }
    Ok(Some(s))
}

fn country_name(code: &str) -> &'static str {
    match code {
        "FR" => "France",
        "BE" => "Belgique",
        "DE" => "Deutschland",
        "IT" => "Italia",
        "LU" => "Luxembourg",
        "CH" => "Suisse",
        "NL" => "Nederland",
        "ES" => "España",
        "AT" => "Österreich",
        "PT" => "Portugal",
        "GB" => "United Kingdom",
        "IE" => "Ireland",
        _ => "",
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DirectoryError {
    #[error("no supplier {0:?} in the directory")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl CoreError for DirectoryError {
    fn code(&self) -> Code {
        match self {
            DirectoryError::NotFound(_) => Code::NotFound,
            DirectoryError::Store(e) => e.code(),
        }
    }
}

/// `GET /api/companyinfo/{id}`: the directory's numeric id, or a VAT number.
pub fn company_info(app: &Service, id: &str) -> Result<Supplier, DirectoryError> {
    let id = id.trim();
    let found = in_read(&*app.store, |tx| match crate::kernel::parse_positive_id(id) {
        Ok(n) => tx.supplier_by_id(SupplierId::from_stored(n)),
        Err(_) => match VatNumber::parse(id) {
            Some(vat) => tx.supplier_by_vat(&vat),
            None => Ok(None),
        },
    })?;
    found.ok_or_else(|| DirectoryError::NotFound(id.chars().take(40).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vat_numbers_have_one_spelling() {
        let v = VatNumber::parse("fr 40 303.265.045").unwrap();
        assert_eq!(v.as_str(), "FR40303265045");
        assert_eq!(v.country(), "FR");
        assert_eq!(v.siren(), Some("303265045"));
        assert_eq!(VatNumber::parse("EL123456789").unwrap().country(), "GR");
        assert_eq!(VatNumber::parse("BE0123456789").unwrap().siren(), None);
        for bad in ["", "F", "12345678901", "FR", "FR1", "FR€1234567", "FRABCDEFGHIJKLMNOP"] {
            assert!(VatNumber::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn names_fold_for_lookups() {
        assert_eq!(name_key("  ACME   Fournitures\tSAS "), "acme fournitures sas");
        assert!(!Facts { name: Some("  ".into()), ..Facts::default() }.identifies());
    }
}
