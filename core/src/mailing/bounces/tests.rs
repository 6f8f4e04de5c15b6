use super::recognise::{Verdict, recognise};
use super::*;
use crate::adapters::mime::MailParserReader;
use std::path::PathBuf;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bounces")
}

/// One corpus message: its file, whether it is held out, the expected outcome and addresses.
struct Case {
    file: String,
    held: bool,
    expected: Option<Permanence>,
    addresses: Vec<String>,
}

/// The corpus's sets, each a folder with its `expected.tsv` (see `fixtures/bounces/README.md`).
pub(crate) const SETS: &[&str] = &["flufl", "bounced", "baunsu"];

fn cases() -> Vec<Case> {
    let mut all = Vec::new();
    for set in SETS {
        let text = std::fs::read_to_string(corpus_dir().join(set).join("expected.tsv")).unwrap();
        all.extend(text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            Case {
                file: format!("{set}/{}", cols[0]),
                held: cols[1] == "held",
                expected: match cols[2] {
                    "none" => None,
                    other => Some(Permanence::parse(other).expect("permanent, temporary or none")),
                },
                addresses: cols
                    .get(3)
                    .map_or(Vec::new(), |a| a.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect()),
            }
        }));
    }
    all
}

/// What the product makes of a corpus message sent back to a copy's VERP address: the member is
/// the copy's (the first expected address), the permanence the recogniser's; `None` when it would
/// be forwarded to the owners.
pub(crate) fn outcome(raw: &[u8], member: &str) -> Option<Permanence> {
    let parsed = MailParserReader.read(raw).unwrap_or_default();
    match recognise(&parsed) {
        v @ Verdict::Bounce { .. } => v.for_member(member).map(|f| f.permanence),
        Verdict::NoFailure | Verdict::Unrecognised => None,
    }
}

#[test]
fn every_corpus_bounce_maps_to_its_member_and_permanence_or_is_a_listed_miss() {
    let misses_text = std::fs::read_to_string(corpus_dir().join("misses.txt")).unwrap();
    let listed: Vec<&str> = misses_text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let mut wrong = Vec::new();
    let mut fixed = Vec::new();
    let (mut tune, mut tune_ok, mut held, mut held_ok) = (0, 0, 0, 0);
    for c in cases() {
        let raw = std::fs::read(corpus_dir().join(&c.file)).unwrap();
        let member = c.addresses.first().map_or("member@example.invalid", String::as_str);
        let got = outcome(&raw, member);
        let ok = got == c.expected;
        if c.held {
            held += 1;
            held_ok += u32::from(ok);
        } else {
            tune += 1;
            tune_ok += u32::from(ok);
        }
        match (ok, listed.contains(&c.file.as_str())) {
            (false, false) => wrong.push(format!("{}: expected {:?}, got {got:?}", c.file, c.expected)),
            (true, true) => fixed.push(c.file.clone()),
            _ => {}
        }
    }
    eprintln!("tuning set {tune_ok}/{tune}, held-out set {held_ok}/{held}");
    assert!(wrong.is_empty(), "misses not listed in fixtures/bounces/misses.txt:\n{}", wrong.join("\n"));
    assert!(fixed.is_empty(), "listed as misses but now right (take them off the list): {fixed:?}");
}
