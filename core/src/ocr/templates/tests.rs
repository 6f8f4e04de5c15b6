use super::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/invoice2data")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Compares as invoice2data's own tests do: every expected key (but `desc`, which names the
/// template) present with the same value, numbers compared as numbers.
fn same(expected: &Value, got: &Value) -> bool {
    match (expected, got) {
        (Value::Number(a), Value::Number(b)) => {
            (a.as_f64().unwrap_or(f64::NAN) - b.as_f64().unwrap_or(0.0)).abs() < 1e-9
        }
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y)),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        (a, b) => a == b,
    }
}

#[test]
fn the_five_custom_cases_give_invoice2datas_expected_output() {
    let dir = fixtures().join("custom");
    let mut checked = 0;
    for case in ["basic", "lines-basic", "lines-blocks", "lines-multiple-patterns", "table-groups"] {
        let template = Template::parse(&read(&dir.join(format!("templates/{case}.yml")))).expect(case);
        let text = read(&dir.join(format!("{case}.txt")));
        let expected: Value = serde_json::from_str(&read(&dir.join(format!("{case}.json")))).expect(case);
        let expected = expected[0].as_object().expect("one object");
        let got = template.extract(&text).unwrap_or_else(|| panic!("{case}: the template does not match its text"));
        assert!(got.missing.is_empty(), "{case}: missing {:?}", got.missing);
        for (key, want) in expected {
            let have = got.fields.get(key).unwrap_or(&Value::Null);
            assert!(same(want, have), "{case}.{key}: expected {want}, got {have}");
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} fields compared");
}

#[test]
fn every_bundled_template_loads_or_is_refused_with_its_reason() {
    let mut loaded = 0;
    let mut refused = Vec::new();
    let mut stack = vec![fixtures().join("templates")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("templates dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            match Template::parse(&read(&path)) {
                Ok(_) => loaded += 1,
                Err(e) => {
                    let reason = e.to_string();
                    // A clear reason names what is wrong, never an empty or generic line.
                    assert!(reason.len() > 30 && !reason.contains("unknown"), "{}: {reason}", path.display());
                    refused.push(format!("{}: {reason}", path.file_name().unwrap_or_default().to_string_lossy()));
                }
            }
        }
    }
    println!("{loaded} templates loaded, {} refused:", refused.len());
    for r in &refused {
        println!("  {r}");
    }
    assert_eq!(loaded + refused.len(), 215, "every file of the corpus was read");
    // Refusals are the patterns a linear-time engine cannot run (look-around, back-references);
    // anything more means the loader misreads the format.
    assert!(refused.len() <= 5, "too many refusals: {refused:#?}");
}

#[test]
fn a_bundled_legacy_template_extracts_from_text_laid_out_like_pdftotext() {
    let t = Template::parse(&read(&fixtures().join("templates/fr/com.akretion.fr.yml"))).expect("akretion loads");
    let text = "AKRETION FRANCE  SIREN 792 377 731\nFacture FA2019001      Date : 05/03/2019\n\
                Echéance 05/04/2019 12/04/2019\nTotal HT : 1000,00 €\nTotal TTC : 1200,00 €\n";
    let ex = t.extract(text).expect("keywords match");
    assert_eq!(ex.fields["invoice_number"], "FA2019001");
    assert_eq!(ex.fields["amount"], serde_json::json!(1200.0));
    let meta = t.meta(&ex);
    assert_eq!(meta["amount"], "1200.00");
    assert_eq!(meta["amount_untaxed"], "1000.00");
    assert_eq!(meta["supplier_name"], "Akretion France");
    assert_eq!(meta["date"], "2019-03-05");
    assert_eq!(meta["confidence"]["amount"], 1.0);
    assert_eq!(meta["supplier_siret"], "792377731");
    assert_eq!(meta["due_date"], "2019-04-12");
    assert_eq!(meta["template"], "Akretion France");
    assert!(t.extract("an invoice from somebody else").is_none());
}

#[test]
fn exclude_keywords_and_options_change_what_matches() {
    let t = Template::parse(
        "issuer: X\nkeywords: [Facture]\nexclude_keywords: [Avoir]\nfields:\n  amount: TOTAL(\\d+,\\d\\d)\n\
         options:\n  remove_whitespace: true\n  decimal_separator: ','\n  lowercase: false\n",
    )
    .expect("parses");
    assert!(t.extract("Avoir Facture TOTAL 12,50").is_none());
    let ex = t.extract("Facture  TOTAL  1 212,50").expect("matches");
    assert_eq!(ex.fields["amount"], serde_json::json!(1212.5));
    assert_eq!(ex.missing, vec!["date".to_owned(), "invoice_number".to_owned()]);
}

#[test]
fn malformed_templates_are_refused_with_a_reason() {
    for (yaml, needle) in [
        ("issuer: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "not a mapping"),
        ("keywords: [a]\n", "issuer is missing"),
        ("issuer: X\n", "keywords is missing"),
        ("issuer: X\nkeywords: ['(unclosed']\n", "keywords: the regular expression"),
        ("issuer: X\nkeywords: [a]\nfields:\n  amount:\n    parser: magic\n", "parser \"magic\""),
        ("issuer: X\nkeywords: [a]\nfields:\n  amount:\n    parser: regex\n    regex: 'a(?=b)'\n", "look-around"),
        (
            "issuer: X\nkeywords: [a]\nfields:\n  amount:\n    parser: regex\n    regex: a\n    group: median\n",
            "median",
        ),
        ("issuer: X\nkeywords: [a]\noptions:\n  decimal_separator: ',,'\n", "decimal_separator"),
    ] {
        let err = Template::parse(yaml).expect_err(yaml).to_string();
        assert!(err.contains(needle), "{yaml:?}: {err}");
    }
}

#[test]
fn an_alias_bomb_is_refused_fast_and_small() {
    // Billion laughs: nine levels of ten aliases, 10^9 strings once expanded.
    let mut yaml = String::from("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"].iter().zip(["b", "c", "d", "e", "f", "g", "h", "i"]) {
        let refs = vec![format!("*{prev}"); 9].join(",");
        yaml.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    yaml.push_str("issuer: bomb\nkeywords: [x]\n");
    let started = Instant::now();
    let err = Template::parse(&yaml).expect_err("the bomb is refused");
    println!("bomb refused in {:?}: {err}", started.elapsed());
    assert!(matches!(err, TemplateError::Syntax(_)), "{err}");
}

#[test]
fn oversize_and_deep_filters_are_refused_before_parsing() {
    let big = format!("issuer: X\nkeywords: [a]\n#{}\n", "x".repeat(MAX_TEMPLATE_BYTES));
    assert!(matches!(Template::parse(&big), Err(TemplateError::TooLarge { .. })));
    let deep = format!("issuer: X\nkeywords: [a]\nz: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
    assert!(matches!(Template::parse(&deep), Err(TemplateError::Syntax(_))));
}

#[test]
fn python_replacements_become_the_engines() {
    assert_eq!(python_replacement(r"\1 EUR"), "${1} EUR");
    assert_eq!(python_replacement("5$"), "5$$");
    let t = Template::parse("issuer: X\nkeywords: [TOTAL]\noptions:\n  replace:\n    - ['(\\d),(\\d)', '\\1.\\2']\nfields:\n  amount: TOTAL (\\d+\\.\\d+)\n")
        .expect("parses");
    assert_eq!(t.extract("TOTAL 12,50").expect("matches").fields["amount"], serde_json::json!(12.5));
}
