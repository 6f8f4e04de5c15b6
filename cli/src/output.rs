//! What every command shares: the arguments naming a list or a window, the parsing of values
//! through core (a bad value is exit 1, as the API's 422), and the two renderings: one JSON
//! document with `--json`, a table or a sentence for people otherwise.

use crate::error::CliError;
use clap::Args;
use courrier_core::kernel::{Code, DomainName, ListName, Page};
use serde_json::{Value, json};
use std::io::{IsTerminal, Read};

/// `--domain D --list L`: how every command names a list.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// The list's domain.
    #[arg(long, value_name = "DOMAIN")]
    pub domain: String,
    /// The list's name (the part before the @ of its address).
    #[arg(long, value_name = "LIST")]
    pub list: String,
}

impl ListArgs {
    pub fn names(&self) -> Result<(DomainName, ListName), CliError> {
        Ok((DomainName::parse(&self.domain)?, ListName::parse(&self.list)?))
    }
}

/// `--limit N --offset N`: the window of a listing, with the API's bounds (1 to 500, 50 by
/// default).
#[derive(Debug, Clone, Args)]
pub struct PageArgs {
    /// How many entries, from 1 to 500 (default 50).
    #[arg(long, value_name = "N")]
    pub limit: Option<String>,
    /// How many entries to skip.
    #[arg(long, value_name = "N")]
    pub offset: Option<String>,
}

impl PageArgs {
    pub fn page(&self) -> Result<Page, CliError> {
        Ok(Page::parse(self.limit.as_deref(), self.offset.as_deref())?)
    }
}

/// A refused value, with the API's code (exit 1).
pub fn invalid(message: impl Into<String>) -> CliError {
    CliError::Input { code: Code::ValidationFailed, message: message.into() }
}

/// A positive integer id named `what`.
pub fn id(what: &str, raw: &str) -> Result<i64, CliError> {
    courrier_core::kernel::parse_positive_id(raw.trim())
        .map_err(|_| invalid(format!("{what} must be a positive integer, got {raw:?}")))
}

/// An enum value by its wire name, refused with the names it may take.
pub fn wire<T>(
    field: &str,
    raw: Option<&str>,
    parse: fn(&str) -> Option<T>,
    names: &[&str],
) -> Result<Option<T>, CliError> {
    raw.map(|v| parse(v).ok_or_else(|| invalid(format!("{field} {v:?} is not one of {}", names.join(", ")))))
        .transpose()
}

/// A secret read from standard input (never an argument, which `ps` and shell histories show):
/// the whole input, without its final line end.
pub fn secret_from_stdin(what: &str) -> Result<String, CliError> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).map_err(CliError::Stdin)?;
    let text = text.trim_end_matches(['\r', '\n']).to_owned();
    if text.is_empty() {
        return Err(invalid(format!("the {what} is read from standard input, which was empty")));
    }
    Ok(text)
}

/// Prints the command's one JSON document, or its text for people.
/// The command has been done by then: a reader that went away (`| head`) is not an error.
pub fn emit(json: bool, doc: &Value, text: impl FnOnce() -> String) {
    use std::io::Write;
    let out = if json { doc.to_string() } else { text() };
    if !out.is_empty() {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{out}").and_then(|()| stdout.flush());
    }
}

/// A listing's JSON document: the items of the window and the total count.
pub fn collection(items: Vec<Value>, total: u64, page: Page) -> Value {
    json!({ "items": items, "total": total, "limit": page.limit(), "offset": page.offset() })
}

/// A listing for people: a table, then how many of how many.
pub fn listing(headers: &[&str], rows: Vec<Vec<String>>, total: u64, page: Page) -> String {
    let shown = rows.len();
    let mut out = table(headers, rows);
    if shown == 0 {
        out = format!("none (of {total})");
    } else if total > shown as u64 {
        out.push_str(&format!("\n{}-{} of {total}", page.offset() + 1, page.offset() + shown as u64));
    }
    out
}

/// Columns aligned on the widest cell; the last column is not padded.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_owned()
    };
    let mut out = vec![line(headers.to_vec())];
    for row in &rows {
        out.push(line(row.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

/// An optional value as a table cell.
pub fn cell<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// A progress bar on standard error for long work: drawn only on a terminal and never with
/// `--json` (whose output is one document, and whose caller is a program).
pub fn progress(json: bool, len: Option<u64>, template: &str) -> indicatif::ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = match len {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::new_spinner(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_but_the_last() {
        let t = table(&["ID", "EMAIL", "STATUS"], vec![vec!["1".into(), "a@example.org".into(), "active".into()]]);
        assert_eq!(t, "ID  EMAIL          STATUS\n1   a@example.org  active");
    }

    #[test]
    fn ids_are_positive_integers() {
        assert_eq!(id("send", "12").unwrap(), 12);
        for bad in ["0", "-1", "x", ""] {
            assert!(id("send", bad).is_err(), "{bad}");
        }
    }
}
