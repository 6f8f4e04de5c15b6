//! CSV export: `email,display_name,delivery_mode,status,subscribed_at`, read in id-ordered chunks
//! so that a million members stream without being held in memory. The first three columns are
//! the ones import reads, so an export re-imports.

use super::MailingError;
use super::Service;
use super::lists;
use super::model::{MailingList, Member, MemberFilter, MemberId};
use crate::access::principal::RequestCtx;
use crate::access::{Perm, Principal};
use crate::kernel::{DomainName, ListName};
use crate::storage::in_read;

pub const HEADER: &str = "email,display_name,delivery_mode,status,subscribed_at\r\n";
/// Members read per chunk (each chunk is one short read transaction).
pub const CHUNK: u32 = 2000;
/// Cell starts a spreadsheet would run as a formula (CWE-1236).
pub const FORMULA_STARTS: &[char] = &['=', '+', '-', '@', '\t', '\r'];

/// An export in progress: the list it reads and where it stands.
pub struct Export {
    list: MailingList,
    filter: MemberFilter,
    after: Option<MemberId>,
    done: bool,
}

/// Authorises the export (read on the list) and positions it before the first member.
pub fn open(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    filter: MemberFilter,
) -> Result<Export, MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::Read, domain, name, "member.export")?;
    Ok(Export { list, filter, after: None, done: false })
}

impl Export {
    pub fn list(&self) -> &MailingList {
        &self.list
    }

    /// The next rows as CSV text; `None` once every member has been written.
    pub fn next_chunk(&mut self, app: &Service) -> Result<Option<String>, MailingError> {
        if self.done {
            return Ok(None);
        }
        let members = in_read(&*app.store, |tx| tx.members_after(self.list.id, &self.filter, self.after, CHUNK))?;
        if members.len() < CHUNK as usize {
            self.done = true;
        }
        let Some(last) = members.last() else { return Ok(None) };
        self.after = Some(last.id);
        let mut out = String::with_capacity(members.len() * 64);
        for m in &members {
            row(&mut out, m);
        }
        Ok(Some(out))
    }
}

fn row(out: &mut String, m: &Member) {
    let subscribed = m.subscribed_at.map(|t| t.to_rfc3339()).unwrap_or_default();
    let cells = [
        m.email.to_string(),
        m.display_name.clone().unwrap_or_default(),
        m.delivery_mode.as_str().to_owned(),
        m.status.as_str().to_owned(),
        subscribed,
    ];
    for (i, c) in cells.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_cell(out, c);
    }
    out.push_str("\r\n");
}

/// RFC 4180 quoting, after neutralising a formula start with a leading `'`.
fn write_cell(out: &mut String, value: &str) {
    let neutral = if value.starts_with(FORMULA_STARTS) { format!("'{value}") } else { value.to_owned() };
    if neutral.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&neutral.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(&neutral);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(v: &str) -> String {
        let mut s = String::new();
        write_cell(&mut s, v);
        s
    }

    #[test]
    fn cells_are_quoted_and_formulas_neutralised() {
        assert_eq!(cell("plain"), "plain");
        assert_eq!(cell("Doe, Jane"), "\"Doe, Jane\"");
        assert_eq!(cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(cell("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(cell("+1"), "'+1");
        assert_eq!(cell("-2"), "'-2");
        assert_eq!(cell("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(cell("\tx"), "'\tx");
        assert_eq!(cell("\rx"), "\"'\rx\"");
        assert_eq!(cell(""), "");
    }
}
