//! `yamlFilter`: invoice templates in the invoice2data format (decisions.md), read once at the
//! edge into a checked [`Template`], then matched against a document's text and applied.
//!
//! The YAML is untrusted: its size is bounded before parsing and the parser's budget bounds
//! aliases, nodes and depth, so an alias bomb is refused in microseconds instead of growing to
//! gigabytes. Its regular expressions run on the `regex` crate, whose matching time is linear in
//! the text whatever the pattern; the price is that look-around and back-references (which two
//! of invoice2data's 200 bundled templates use) are refused with the engine's reason.

pub mod coerce;
mod meta;
mod rules;

pub use meta::to_meta;
use rules::{FieldRule, LinesRule, TableRule};
use serde_json::{Map, Value};

/// The largest `yamlFilter` read; invoice2data's biggest bundled template is about 6 KiB.
pub const MAX_TEMPLATE_BYTES: usize = 64 * 1024;

/// Compiled size of one regular expression; a pattern that needs more is refused. Python's
/// `\w` is Unicode, so `\w{8,11}` (a BIC, in 30 bundled templates) alone compiles to ~1 MiB.
const MAX_REGEX_BYTES: usize = 4 * 1024 * 1024;

/// Compiled size of all of one template's regular expressions together: without it, 64 KiB of
/// short expensive patterns (`\w{20}` repeated) would compile to gigabytes.
const MAX_TEMPLATE_REGEX_BYTES: usize = 48 * 1024 * 1024;

thread_local! {
    /// What the template being read may still compile. Reading a template is synchronous on one
    /// thread, so a thread-local budget, reset by `Template::parse`, is exactly one template's.
    static REGEX_BUDGET: std::cell::Cell<usize> = const { std::cell::Cell::new(MAX_TEMPLATE_REGEX_BYTES) };
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("the yamlFilter is {size} bytes, over the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("the yamlFilter is not valid YAML: {0}")]
    Syntax(String),
    #[error("the yamlFilter is not an invoice2data template: {0}")]
    Shape(String),
}

/// What a template changes in the text before matching: invoice2data's options.
#[derive(Debug, Clone)]
struct Options {
    currency: String,
    date_formats: Vec<String>,
    languages: Vec<String>,
    decimal_separator: char,
    replace: Vec<(regex::Regex, String)>,
    remove_whitespace: bool,
    remove_accents: bool,
    lowercase: bool,
}

/// A checked invoice2data template.
#[derive(Debug, Clone)]
pub struct Template {
    pub issuer: String,
    keywords: Vec<regex::Regex>,
    exclude_keywords: Vec<regex::Regex>,
    fields: Vec<(String, FieldRule)>,
    /// The legacy top-level `lines:` block, output as `lines`.
    lines: Option<Vec<LinesRule>>,
    tables: Vec<TableRule>,
    options: Options,
    required_fields: Vec<String>,
}

/// What a matching template found, under invoice2data's names (`issuer`, `amount`, `date`, ...),
/// values typed as its JSON output types them.
#[derive(Debug, Clone, PartialEq)]
pub struct Extraction {
    pub fields: Map<String, Value>,
    /// Required fields (invoice2data's default: date, amount, invoice_number, issuer) not found:
    /// invoice2data then discards the whole result; we keep what was found and say what is missing.
    pub missing: Vec<String>,
}

fn budget() -> serde_saphyr::Budget {
    let mut b = serde_saphyr::Budget::default();
    b.max_aliases = 64;
    b.max_anchors = 64;
    b.max_nodes = 20_000;
    b.max_events = 100_000;
    b.max_depth = 32;
    b.max_documents = 1;
    b.max_total_scalar_bytes = 4 * MAX_TEMPLATE_BYTES;
    b.max_recorded_anchor_events = 10_000;
    b.max_recorded_anchor_bytes = 4 * MAX_TEMPLATE_BYTES;
    b.max_merge_keys = 64;
    b
}

impl Template {
    /// Reads and checks a template: every regex compiled, every option of the right type. An
    /// unknown parser, a regex the engine refuses, or a missing issuer is an error naming it.
    pub fn parse(yaml: &str) -> Result<Self, TemplateError> {
        if yaml.len() > MAX_TEMPLATE_BYTES {
            return Err(TemplateError::TooLarge { size: yaml.len(), limit: MAX_TEMPLATE_BYTES });
        }
        let options = serde_saphyr::options! {
            budget: Some(budget()),
            // PyYAML, which invoice2data uses, keeps the last of duplicated keys; 13 bundled
            // templates repeat one.
            duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::LastWins,
        };
        REGEX_BUDGET.with(|b| b.set(MAX_TEMPLATE_REGEX_BYTES));
        let root: Value = serde_saphyr::from_str_with_options(yaml, options)
            .map_err(|e| TemplateError::Syntax(first_line(&e.to_string())))?;
        Self::from_value(&root)
    }

    fn from_value(root: &Value) -> Result<Self, TemplateError> {
        let root = root.as_object().ok_or_else(|| shape("the document is not a mapping"))?;
        // The issuer may instead be a field read from the document (newer invoice2data templates).
        let issuer_field = root.get("fields").and_then(|f| f.get("issuer")).is_some();
        let issuer = match root.get("issuer") {
            Some(v) => scalar(v).ok_or_else(|| shape("issuer is not text"))?,
            None if issuer_field => String::new(),
            None => return Err(shape("issuer is missing: name the supplier the template is for")),
        };
        let keywords = regexes(root.get("keywords"), "keywords")?;
        if keywords.is_empty() {
            return Err(shape("keywords is missing: a template must say which documents it is for"));
        }
        let exclude_keywords = regexes(root.get("exclude_keywords"), "exclude_keywords")?;
        let options = read_options(root.get("options"))?;
        let mut fields = Vec::new();
        if let Some(v) = root.get("fields") {
            let map = v.as_object().ok_or_else(|| shape("fields is not a mapping"))?;
            for (name, spec) in map {
                fields.push((name.clone(), FieldRule::read(name, spec)?));
            }
        }
        let lines = match root.get("lines") {
            Some(v) => Some(LinesRule::read_all("lines", v)?),
            None => None,
        };
        let tables = match root.get("tables") {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                items.iter().enumerate().map(|(i, t)| TableRule::read(i, t)).collect::<Result<_, _>>()?
            }
            Some(t @ Value::Object(_)) => vec![TableRule::read(0, t)?],
            Some(_) => return Err(shape("tables is not a list")),
        };
        let required_fields = match root.get("required_fields") {
            None => ["date", "amount", "invoice_number", "issuer"].map(String::from).to_vec(),
            Some(v) => texts(v).ok_or_else(|| shape("required_fields is not a list of names"))?,
        };
        Ok(Self { issuer, keywords, exclude_keywords, fields, lines, tables, options, required_fields })
    }

    /// The text as the template's options prepare it (invoice2data's `prepare_input`).
    fn prepare(&self, text: &str) -> String {
        let o = &self.options;
        let mut s = if o.remove_whitespace { text.replace(' ', "") } else { text.to_owned() };
        if o.remove_accents {
            s = strip_accents(&s);
        }
        if o.lowercase {
            s = s.to_lowercase();
        }
        for (from, to) in &o.replace {
            s = from.replace_all(&s, to.as_str()).into_owned();
        }
        s
    }

    /// Whether every keyword and no excluded keyword is found in the prepared text.
    pub fn matches(&self, text: &str) -> bool {
        let prepared = self.prepare(text);
        self.matches_prepared(&prepared)
    }

    fn matches_prepared(&self, prepared: &str) -> bool {
        self.keywords.iter().all(|k| k.is_match(prepared))
            && !self.exclude_keywords.iter().any(|k| k.is_match(prepared))
    }

    /// The template's fields, when it matches the text.
    pub fn extract(&self, text: &str) -> Option<Extraction> {
        let prepared = self.prepare(text);
        if !self.matches_prepared(&prepared) {
            return None;
        }
        let ctx = rules::Ctx { options: &self.options };
        let mut out = Map::new();
        if !self.issuer.is_empty() {
            out.insert("issuer".into(), self.issuer.clone().into());
        }
        for (name, rule) in &self.fields {
            if let Some((key, value)) = rule.apply(name, &prepared, &ctx) {
                out.insert(key, value);
            }
        }
        if let Some(lines) = &self.lines {
            let rows = rules::lines(lines, &prepared, &ctx);
            if !rows.is_empty() {
                out.insert("lines".into(), Value::Array(rows));
            }
        }
        for table in &self.tables {
            table.apply(&prepared, &ctx, &mut out);
        }
        out.insert("currency".into(), self.options.currency.clone().into());
        let missing = self.required_fields.iter().filter(|f| !out.contains_key(f.as_str())).cloned().collect();
        let issuer = out.get("issuer").and_then(Value::as_str).unwrap_or(&self.issuer).to_owned();
        out.insert("desc".into(), format!("Invoice from {issuer}").into());
        Some(Extraction { fields: out, missing })
    }
}

fn shape(msg: impl Into<String>) -> TemplateError {
    TemplateError::Shape(msg.into())
}

fn first_line(s: &str) -> String {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or(s).trim().chars().take(300).collect()
}

/// A YAML scalar as text (YAML reads `regex: 1234` as a number; templates mean the text).
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// One text or a list of texts.
fn texts(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::Array(items) => items.iter().map(scalar).collect(),
        Value::Null => Some(Vec::new()),
        other => scalar(other).map(|s| vec![s]),
    }
}

/// A Python regular expression as this engine reads it: `\Z` (Python's end of text) is `\z`
/// here, and `{,n}` is `{0,n}`; the rest of the syntax templates use is shared.
///
/// The compiled size is charged to the template's budget by the smallest of a few growing
/// limits the pattern fits in (the engine does not report its size): almost every pattern fits
/// the first, and a failed attempt stops at its limit.
fn compile(pattern: &str, what: &str) -> Result<regex::Regex, TemplateError> {
    let translated = python_syntax(pattern);
    let refused =
        |e: &regex::Error| shape(format!("{what}: the regular expression {pattern:?} is refused: {}", regex_reason(e)));
    let mut limit = 64 * 1024;
    loop {
        let remaining = REGEX_BUDGET.with(std::cell::Cell::get);
        if limit > remaining {
            return Err(shape(format!(
                "{what}: the template's regular expressions together exceed {} MiB once compiled",
                MAX_TEMPLATE_REGEX_BYTES / (1024 * 1024)
            )));
        }
        match regex::RegexBuilder::new(&translated).size_limit(limit).dfa_size_limit(limit).build() {
            Ok(re) => {
                REGEX_BUDGET.with(|b| b.set(remaining - limit));
                return Ok(re);
            }
            Err(regex::Error::CompiledTooBig(_)) if limit < MAX_REGEX_BYTES => limit *= 4,
            Err(e) => return Err(refused(&e)),
        }
    }
}

fn python_syntax(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut escaped = false;
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            'Z' if escaped => out.push('z'),
            '{' if !escaped && chars.peek() == Some(&',') => out.push_str("{0"),
            c => out.push(c),
        }
        escaped = c == '\\' && !escaped;
    }
    out
}

fn regex_reason(e: &regex::Error) -> String {
    let text = e.to_string();
    // The crate's message spans lines with a caret under the pattern; its last line says why.
    text.lines()
        .rev()
        .find(|l| l.trim_start().starts_with("error:"))
        .map_or(text.clone(), |l| l.trim_start().trim_start_matches("error:").trim().to_owned())
}

fn regexes(v: Option<&Value>, what: &str) -> Result<Vec<regex::Regex>, TemplateError> {
    let Some(v) = v else { return Ok(Vec::new()) };
    let list = texts(v).ok_or_else(|| shape(format!("{what} is not a text or a list of texts")))?;
    list.iter().map(|p| compile(p, what)).collect()
}

fn read_options(v: Option<&Value>) -> Result<Options, TemplateError> {
    let empty = Map::new();
    let o = match v {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(o)) => o,
        Some(_) => return Err(shape("options is not a mapping")),
    };
    let flag = |name: &str| -> Result<bool, TemplateError> {
        match o.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            // `remove_accents: [True]` (one bundled template): Python reads the list as true.
            Some(Value::Array(items)) if matches!(items.as_slice(), [Value::Bool(_)]) => {
                Ok(items[0] == Value::Bool(true))
            }
            Some(_) => Err(shape(format!("options.{name} is not true or false"))),
        }
    };
    let list = |name: &str| -> Result<Vec<String>, TemplateError> {
        o.get(name).map_or(Ok(Vec::new()), |v| texts(v).ok_or_else(|| shape(format!("options.{name} is not a list"))))
    };
    let decimal_separator = match o.get("decimal_separator").map(scalar) {
        None => '.',
        Some(Some(s)) if s.chars().count() == 1 => s.chars().next().unwrap_or('.'),
        Some(_) => return Err(shape("options.decimal_separator is not one character")),
    };
    let mut replace = Vec::new();
    if let Some(v) = o.get("replace") {
        let pairs = v.as_array().ok_or_else(|| shape("options.replace is not a list of [from, to] pairs"))?;
        for pair in pairs {
            match pair.as_array().map(|p| p.iter().map(scalar).collect::<Option<Vec<_>>>()) {
                Some(Some(p)) if p.len() == 2 => {
                    // Python's re.sub writes groups as \1; the regex crate as ${1}.
                    let to = python_replacement(&p[1]);
                    replace.push((compile(&p[0], "options.replace")?, to));
                }
                _ => return Err(shape("options.replace holds an entry that is not a [from, to] pair")),
            }
        }
    }
    Ok(Options {
        currency: o.get("currency").and_then(scalar).unwrap_or_else(|| "EUR".into()),
        date_formats: list("date_formats")?,
        languages: list("languages")?,
        decimal_separator,
        replace,
        remove_whitespace: flag("remove_whitespace")?,
        remove_accents: flag("remove_accents")?,
        lowercase: flag("lowercase")?,
    })
}

/// `\1` -> `${1}`, and a literal `$` kept literal.
fn python_replacement(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' => out.push_str("$$"),
            '\\' if chars.peek().is_some_and(char::is_ascii_digit) => {
                let d = chars.next().unwrap_or('0');
                out.push_str(&format!("${{{d}}}"));
            }
            c => out.push(c),
        }
    }
    out
}

/// Latin letters without their accents (invoice2data uses unidecode; templates only ever need
/// the Latin range).
fn strip_accents(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' => 'a',
            'À' | 'Á' | 'Â' | 'Ã' | 'Ä' | 'Å' => 'A',
            'ç' => 'c',
            'Ç' => 'C',
            'è' | 'é' | 'ê' | 'ë' => 'e',
            'È' | 'É' | 'Ê' | 'Ë' => 'E',
            'ì' | 'í' | 'î' | 'ï' => 'i',
            'Ì' | 'Í' | 'Î' | 'Ï' => 'I',
            'ñ' => 'n',
            'Ñ' => 'N',
            'ò' | 'ó' | 'ô' | 'õ' | 'ö' => 'o',
            'Ò' | 'Ó' | 'Ô' | 'Õ' | 'Ö' => 'O',
            'ù' | 'ú' | 'û' | 'ü' => 'u',
            'Ù' | 'Ú' | 'Û' | 'Ü' => 'U',
            'ý' | 'ÿ' => 'y',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests;
