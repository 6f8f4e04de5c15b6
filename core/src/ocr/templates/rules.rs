//! The three field parsers of invoice2data (`regex`, `static`, `lines`), its legacy field forms,
//! and its `tables`, with the same outputs: one value when one is found, a list when several are,
//! a `group` (sum, min, max, first, last, join) folding a list into one.

use super::coerce::{self, Date};
use super::{Options, TemplateError, compile, regexes, scalar, shape};
use serde_json::{Map, Value};

pub(super) struct Ctx<'a> {
    pub options: &'a Options,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Int,
    Float,
    Date,
}

impl Type {
    fn read(s: &str, what: &str) -> Result<Self, TemplateError> {
        match s {
            "int" => Ok(Type::Int),
            "float" => Ok(Type::Float),
            "date" => Ok(Type::Date),
            other => Err(shape(format!("{what}: type {other:?} is not one of int, float, date"))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Sum,
    Min,
    Max,
    First,
    Last,
    Join,
}

impl Group {
    fn read(s: &str, what: &str) -> Result<Self, TemplateError> {
        match s {
            "sum" => Ok(Group::Sum),
            "min" => Ok(Group::Min),
            "max" => Ok(Group::Max),
            "first" => Ok(Group::First),
            "last" => Ok(Group::Last),
            "join" => Ok(Group::Join),
            other => Err(shape(format!("{what}: group {other:?} is not one of sum, min, max, first, last, join"))),
        }
    }

    fn fold(self, values: Vec<Value>) -> Option<Value> {
        match self {
            Group::First => values.into_iter().next(),
            Group::Last => values.into_iter().next_back(),
            Group::Join => {
                let parts: Vec<String> =
                    values.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)).collect();
                (!parts.is_empty()).then(|| parts.join(" ").into())
            }
            Group::Sum | Group::Min | Group::Max => {
                let all_int = values.iter().all(Value::is_i64);
                let numbers: Vec<f64> = values.iter().filter_map(Value::as_f64).collect();
                if numbers.is_empty() || numbers.len() != values.len() {
                    return None;
                }
                let n = match self {
                    Group::Sum => numbers.iter().sum(),
                    Group::Min => numbers.iter().copied().fold(f64::INFINITY, f64::min),
                    _ => numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                };
                Some(number_value(n, all_int))
            }
        }
    }
}

fn number_value(n: f64, int: bool) -> Value {
    if int && n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        // Sums of decimals drift (7 + 4 + 0.01); amounts have at most a few decimals.
        let rounded = (n * 1e6).round() / 1e6;
        serde_json::Number::from_f64(rounded).map_or(Value::Null, Value::Number)
    }
}

/// A value as the template's type reads it; `None` when it cannot be (invoice2data would raise
/// or yield nothing).
fn coerce(raw: &str, ty: Type, ctx: &Ctx) -> Option<Value> {
    let o = ctx.options;
    match ty {
        Type::Float => coerce::number(raw, o.decimal_separator).map(|n| number_value(n, false)),
        Type::Int => coerce::number(raw, o.decimal_separator).map(|n| Value::from(n.trunc() as i64)),
        Type::Date => parse_date(raw, ctx).map(|d| d.iso().into()),
    }
}

fn parse_date(raw: &str, ctx: &Ctx) -> Option<Date> {
    let o = ctx.options;
    o.date_formats
        .iter()
        .find_map(|f| coerce::strptime(raw, f))
        .or_else(|| coerce::loose_date(raw, coerce::day_first(&o.languages)))
}

/// The type invoice2data gives an untyped value by its name (legacy fields and tables).
fn type_by_name(name: &str) -> Option<Type> {
    if name.starts_with("date") || name.ends_with("date") {
        Some(Type::Date)
    } else if name.starts_with("amount") {
        Some(Type::Float)
    } else {
        None
    }
}

#[derive(Debug, Clone)]
pub enum FieldRule {
    Regex { regexes: Vec<regex::Regex>, ty: Option<Type>, group: Option<Group>, legacy: bool },
    Static(Value),
    Lines(Vec<LinesRule>),
}

impl FieldRule {
    pub fn read(name: &str, spec: &Value) -> Result<Self, TemplateError> {
        let what = format!("fields.{name}");
        if let Value::Object(o) = spec {
            let parser = o.get("parser").and_then(scalar).ok_or_else(|| shape(format!("{what} has no parser")))?;
            return match parser.as_str() {
                "regex" => {
                    let regexes = regexes(o.get("regex"), &what)?;
                    if regexes.is_empty() {
                        return Err(shape(format!("{what}: the regex parser needs regex")));
                    }
                    let ty = o.get("type").and_then(scalar).map(|t| Type::read(&t, &what)).transpose()?;
                    let group = o.get("group").and_then(scalar).map(|g| Group::read(&g, &what)).transpose()?;
                    Ok(FieldRule::Regex { regexes, ty, group, legacy: false })
                }
                "static" => match o.get("value") {
                    Some(v) if !v.is_object() && !v.is_array() => Ok(FieldRule::Static(v.clone())),
                    _ => Err(shape(format!("{what}: the static parser needs a value"))),
                },
                "lines" => Ok(FieldRule::Lines(LinesRule::read_all(&what, spec)?)),
                other => Err(shape(format!("{what}: parser {other:?} is not one of regex, static, lines"))),
            };
        }
        if name.starts_with("static_") {
            return Ok(FieldRule::Static(spec.clone()));
        }
        let regexes = regexes(Some(spec), &what)?;
        let (ty, group) = if name.starts_with("sum_amount") && spec.is_array() {
            (Some(Type::Float), Some(Group::Sum))
        } else {
            (type_by_name(name), None)
        };
        Ok(FieldRule::Regex { regexes, ty, group, legacy: true })
    }

    /// The output key and value, or `None` when nothing was found.
    pub fn apply(&self, name: &str, text: &str, ctx: &Ctx) -> Option<(String, Value)> {
        match self {
            FieldRule::Static(v) => Some((name.strip_prefix("static_").unwrap_or(name).to_owned(), v.clone())),
            FieldRule::Lines(rules) => {
                let rows = lines(rules, text, ctx);
                (!rows.is_empty()).then(|| (name.to_owned(), Value::Array(rows)))
            }
            FieldRule::Regex { regexes, ty, group, legacy } => {
                let key = match group {
                    Some(Group::Sum) if *legacy => name.strip_prefix("sum_").unwrap_or(name),
                    _ => name,
                };
                let mut found: Vec<Value> = Vec::new();
                for re in regexes {
                    let groups = re.captures_len() - 1;
                    // invoice2data refuses a field whose regex captures twice (findall gives tuples).
                    if groups > 1 {
                        return None;
                    }
                    for caps in re.captures_iter(text) {
                        let raw = caps.get(groups).map_or("", |m| m.as_str());
                        let value = match ty {
                            Some(t) => coerce(raw, *t, ctx),
                            None => Some(Value::from(raw)),
                        };
                        found.extend(value);
                    }
                }
                let value = match group {
                    Some(g) => g.fold(found)?,
                    None => {
                        let mut unique: Vec<Value> = Vec::with_capacity(found.len());
                        for v in found {
                            if !unique.contains(&v) {
                                unique.push(v);
                            }
                        }
                        match unique.len() {
                            0 => return None,
                            1 => unique.pop()?,
                            _ if *legacy => unique.swap_remove(0),
                            _ => Value::Array(unique),
                        }
                    }
                };
                Some((key.to_owned(), value))
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct LinesRule {
    start: regex::Regex,
    end: regex::Regex,
    line: Vec<regex::Regex>,
    first_line: Vec<regex::Regex>,
    last_line: Vec<regex::Regex>,
    skip_line: Vec<regex::Regex>,
    separator: regex::Regex,
    types: Vec<(String, Type)>,
}

fn read_types(v: Option<&Value>, what: &str) -> Result<Vec<(String, Type)>, TemplateError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(o)) => o
            .iter()
            .map(|(k, t)| {
                let t = scalar(t).ok_or_else(|| shape(format!("{what}.types.{k} is not a type name")))?;
                Ok((k.clone(), Type::read(&t, what)?))
            })
            .collect(),
        Some(_) => Err(shape(format!("{what}.types is not a mapping"))),
    }
}

fn required_regex(o: &Map<String, Value>, key: &str, what: &str) -> Result<regex::Regex, TemplateError> {
    let pattern = o.get(key).and_then(scalar).ok_or_else(|| shape(format!("{what} needs {key}")))?;
    compile(&pattern, &format!("{what}.{key}"))
}

fn separator(o: &Map<String, Value>, what: &str) -> Result<regex::Regex, TemplateError> {
    match o.get("line_separator").and_then(scalar) {
        Some(s) => compile(&s, &format!("{what}.line_separator")),
        None => compile(r"\n", what),
    }
}

impl LinesRule {
    /// One rule, or several under `rules`, their rows joined in order.
    pub fn read_all(what: &str, v: &Value) -> Result<Vec<Self>, TemplateError> {
        // The legacy top-level `lines:` may be a list of rules itself.
        if let Value::Array(rules) = v {
            return rules
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let o = r.as_object().ok_or_else(|| shape(format!("{what}[{i}] is not a mapping")))?;
                    Self::read(&format!("{what}[{i}]"), o)
                })
                .collect();
        }
        let o = v.as_object().ok_or_else(|| shape(format!("{what} is not a mapping")))?;
        match o.get("rules") {
            Some(Value::Array(rules)) => rules
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    // A rule inherits the types of its parent unless it says its own.
                    let mut merged =
                        r.as_object().cloned().ok_or_else(|| shape(format!("{what}.rules[{i}] is not a mapping")))?;
                    if let (None, Some(t)) = (merged.get("types"), o.get("types")) {
                        merged.insert("types".into(), t.clone());
                    }
                    Self::read(&format!("{what}.rules[{i}]"), &merged)
                })
                .collect(),
            Some(_) => Err(shape(format!("{what}.rules is not a list"))),
            None => Ok(vec![Self::read(what, o)?]),
        }
    }

    fn read(what: &str, o: &Map<String, Value>) -> Result<Self, TemplateError> {
        let line = regexes(o.get("line"), &format!("{what}.line"))?;
        let first_line = regexes(o.get("first_line"), &format!("{what}.first_line"))?;
        if line.is_empty() && first_line.is_empty() {
            return Err(shape(format!("{what} needs line")));
        }
        Ok(Self {
            start: required_regex(o, "start", what)?,
            end: required_regex(o, "end", what)?,
            line,
            first_line,
            last_line: regexes(o.get("last_line"), &format!("{what}.last_line"))?,
            skip_line: regexes(o.get("skip_line"), &format!("{what}.skip_line"))?,
            separator: separator(o, what)?,
            types: read_types(o.get("types"), what)?,
        })
    }

    /// The rows of every block between `start` and `end`, one block after another.
    fn rows(&self, text: &str, ctx: &Ctx) -> Vec<Value> {
        let mut rows = Vec::new();
        let mut rest = text;
        while let Some(s) = self.start.find(rest) {
            let after = &rest[s.end()..];
            let Some(e) = self.end.find(after) else { break };
            rows.extend(self.block(&after[..e.start()], ctx));
            let consumed = s.end() + e.end();
            if consumed == 0 {
                break;
            }
            rest = &rest[consumed..];
        }
        rows
    }

    fn block<'a>(&'a self, content: &str, ctx: &Ctx) -> Vec<Value> {
        let mut rows: Vec<Map<String, Value>> = Vec::new();
        let mut current = Map::new();
        let first_match = |set: &'a [regex::Regex], line: &str| set.iter().find(|r| r.is_match(line));
        for line in self.separator.split(content) {
            // A line the author says to skip is never part of a row, whatever else it looks like.
            if line.trim().is_empty() || self.skip_line.iter().any(|r| r.is_match(line)) {
                continue;
            }
            if let Some(re) = first_match(&self.first_line, line) {
                if !current.is_empty() {
                    rows.push(std::mem::take(&mut current));
                }
                merge_row(re, line, &mut current);
                continue;
            }
            if let Some(re) = first_match(&self.last_line, line) {
                merge_row(re, line, &mut current);
                rows.push(std::mem::take(&mut current));
                continue;
            }
            if let Some(re) = first_match(&self.line, line) {
                merge_row(re, line, &mut current);
                if self.first_line.is_empty() && self.last_line.is_empty() {
                    rows.push(std::mem::take(&mut current));
                }
                continue;
            }
            // A line nothing describes: ignored, as invoice2data ignores it.
        }
        if !current.is_empty() {
            rows.push(current);
        }
        rows.into_iter()
            .map(|mut row| {
                for (name, ty) in &self.types {
                    if let Some(Value::String(raw)) = row.get(name)
                        && let Some(v) = coerce(raw, *ty, ctx)
                    {
                        row.insert(name.clone(), v);
                    }
                }
                Value::Object(row)
            })
            .collect()
    }
}

/// The named groups of `re` on `line` added to the row; a field seen twice is continued on a new
/// line (a label wrapped over two lines).
fn merge_row(re: &regex::Regex, line: &str, row: &mut Map<String, Value>) {
    let Some(caps) = re.captures(line) else { return };
    for name in re.capture_names().flatten() {
        let value = caps.name(name).map_or("", |m| m.as_str().trim());
        let joined = match row.get(name).and_then(Value::as_str) {
            Some(prev) if !prev.is_empty() => format!("{prev}\n{value}"),
            _ => value.to_owned(),
        };
        row.insert(name.to_owned(), joined.into());
    }
}

/// Rows of every rule, in order.
pub(super) fn lines(rules: &[LinesRule], text: &str, ctx: &Ctx) -> Vec<Value> {
    rules.iter().flat_map(|r| r.rows(text, ctx)).collect()
}

#[derive(Debug, Clone)]
pub struct TableRule {
    start: regex::Regex,
    end: regex::Regex,
    body: Vec<regex::Regex>,
    separator: regex::Regex,
    types: Vec<(String, Type)>,
    groups: Vec<(String, Group)>,
}

impl TableRule {
    pub fn read(i: usize, v: &Value) -> Result<Self, TemplateError> {
        let what = format!("tables[{i}]");
        let o = v.as_object().ok_or_else(|| shape(format!("{what} is not a mapping")))?;
        let body = regexes(o.get("body"), &format!("{what}.body"))?;
        if body.is_empty() {
            return Err(shape(format!("{what} needs body")));
        }
        let mut groups = Vec::new();
        match o.get("fields") {
            None | Some(Value::Null) => {}
            Some(Value::Object(fields)) => {
                for (name, spec) in fields {
                    if let Some(g) = spec.get("group").and_then(scalar) {
                        groups.push((name.clone(), Group::read(&g, &format!("{what}.fields.{name}"))?));
                    }
                }
            }
            Some(_) => return Err(shape(format!("{what}.fields is not a mapping"))),
        }
        Ok(Self {
            start: required_regex(o, "start", &what)?,
            end: required_regex(o, "end", &what)?,
            body,
            separator: separator(o, &what)?,
            types: read_types(o.get("types"), &what)?,
            groups,
        })
    }

    /// Every line of the table that its body pattern describes adds its named groups to the
    /// output; a name seen on several lines becomes a list, which the table's `group` may fold.
    pub(super) fn apply(&self, text: &str, ctx: &Ctx, out: &mut Map<String, Value>) {
        let (Some(s), Some(e)) = (self.start.find(text), self.end.find(text)) else { return };
        if e.start() < s.end() {
            return;
        }
        let mut seen: Vec<String> = Vec::new();
        for line in self.separator.split(&text[s.end()..e.start()]) {
            if line.trim().is_empty() {
                continue;
            }
            let Some((re, caps)) = self.body.iter().find_map(|r| r.captures(line).map(|c| (r, c))) else { continue };
            for name in re.capture_names().flatten() {
                let raw = caps.name(name).map_or("", |m| m.as_str().trim());
                let ty = self.types.iter().find(|(n, _)| n == name).map(|(_, t)| *t).or_else(|| type_by_name(name));
                let value = match ty {
                    Some(t) => coerce(raw, t, ctx).unwrap_or_else(|| raw.into()),
                    None => raw.into(),
                };
                match out.get_mut(name) {
                    Some(Value::Array(list)) if seen.iter().any(|s| s == name) => list.push(value),
                    Some(prev) if seen.iter().any(|s| s == name) => *prev = Value::Array(vec![prev.take(), value]),
                    _ => {
                        seen.push(name.to_owned());
                        out.insert(name.to_owned(), value);
                    }
                }
            }
        }
        for (name, group) in &self.groups {
            if let Some(Value::Array(list)) = out.get_mut(name) {
                let values = std::mem::take(list);
                match group.fold(values) {
                    Some(v) => out.insert(name.clone(), v),
                    None => out.remove(name),
                };
            }
        }
    }
}
