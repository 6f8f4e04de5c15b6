//! The value types of invoice2data templates: numbers read with the template's decimal separator,
//! and dates read with its `date_formats` (strptime directives), falling back to the common
//! numeric and month-name forms as invoice2data's date parser does.

/// A number as invoice2data's `parse_number` reads it: the decimal separator may appear once;
/// every other `.`, `,`, `'` or space is a thousands separator. `None` for anything else (a
/// currency sign left in the capture, two decimal separators), where invoice2data would raise.
pub fn number(value: &str, decimal_separator: char) -> Option<f64> {
    if value.matches(decimal_separator).count() > 1 {
        return None;
    }
    let mut cleaned = String::with_capacity(value.len());
    for c in value.trim().chars() {
        if c == decimal_separator {
            cleaned.push('.');
        } else if matches!(c, '.' | ',' | '\'') || c.is_whitespace() {
            continue;
        } else if c.is_ascii_digit() || c == '-' || c == '+' {
            cleaned.push(c);
        } else {
            return None;
        }
    }
    cleaned.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// A calendar date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Date {
    pub year: i32,
    pub month: u32,
    pub day: u32,
}

impl Date {
    pub fn new(year: i32, month: u32, day: u32) -> Option<Self> {
        let days = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
            2 => 28,
            _ => return None,
        };
        ((1..=9999).contains(&year) && (1..=days).contains(&day)).then_some(Self { year, month, day })
    }

    /// ISO 8601, the form of every date in `meta`.
    pub fn iso(self) -> String {
        format!("{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

/// Month names in the languages of the templates (en, fr, de, it, es, nl, pt, pl), full and
/// abbreviated, without case. A date written in any of them is read whatever `languages` says:
/// accepting more than invoice2data cannot turn a date it reads into another one.
const MONTHS: &[(&str, u32)] = &[
    ("january", 1),
    ("jan", 1),
    ("janvier", 1),
    ("janv", 1),
    ("januar", 1),
    ("jänner", 1),
    ("gennaio", 1),
    ("gen", 1),
    ("enero", 1),
    ("ene", 1),
    ("januari", 1),
    ("janeiro", 1),
    ("stycznia", 1),
    ("styczeń", 1),
    ("february", 2),
    ("feb", 2),
    ("février", 2),
    ("fevrier", 2),
    ("févr", 2),
    ("fevr", 2),
    ("fév", 2),
    ("februar", 2),
    ("febbraio", 2),
    ("febrero", 2),
    ("februari", 2),
    ("fevereiro", 2),
    ("lutego", 2),
    ("luty", 2),
    ("march", 3),
    ("mar", 3),
    ("mars", 3),
    ("märz", 3),
    ("maerz", 3),
    ("mär", 3),
    ("mrz", 3),
    ("marzo", 3),
    ("maart", 3),
    ("mrt", 3),
    ("março", 3),
    ("marca", 3),
    ("marzec", 3),
    ("april", 4),
    ("apr", 4),
    ("avril", 4),
    ("avr", 4),
    ("aprile", 4),
    ("abril", 4),
    ("abr", 4),
    ("kwietnia", 4),
    ("kwiecień", 4),
    ("may", 5),
    ("mai", 5),
    ("maggio", 5),
    ("mag", 5),
    ("mayo", 5),
    ("mei", 5),
    ("maio", 5),
    ("maja", 5),
    ("maj", 5),
    ("june", 6),
    ("jun", 6),
    ("juin", 6),
    ("juni", 6),
    ("giugno", 6),
    ("giu", 6),
    ("junio", 6),
    ("junho", 6),
    ("czerwca", 6),
    ("czerwiec", 6),
    ("july", 7),
    ("jul", 7),
    ("juillet", 7),
    ("juil", 7),
    ("juli", 7),
    ("luglio", 7),
    ("lug", 7),
    ("julio", 7),
    ("julho", 7),
    ("lipca", 7),
    ("lipiec", 7),
    ("august", 8),
    ("aug", 8),
    ("août", 8),
    ("aout", 8),
    ("agosto", 8),
    ("ago", 8),
    ("augustus", 8),
    ("sierpnia", 8),
    ("sierpień", 8),
    ("september", 9),
    ("sep", 9),
    ("sept", 9),
    ("septembre", 9),
    ("settembre", 9),
    ("set", 9),
    ("septiembre", 9),
    ("setiembre", 9),
    ("setembro", 9),
    ("września", 9),
    ("wrzesień", 9),
    ("october", 10),
    ("oct", 10),
    ("octobre", 10),
    ("oktober", 10),
    ("okt", 10),
    ("ottobre", 10),
    ("ott", 10),
    ("octubre", 10),
    ("outubro", 10),
    ("out", 10),
    ("października", 10),
    ("październik", 10),
    ("november", 11),
    ("nov", 11),
    ("novembre", 11),
    ("noviembre", 11),
    ("novembro", 11),
    ("listopada", 11),
    ("listopad", 11),
    ("december", 12),
    ("dec", 12),
    ("décembre", 12),
    ("decembre", 12),
    ("déc", 12),
    ("dezember", 12),
    ("dez", 12),
    ("dicembre", 12),
    ("dic", 12),
    ("diciembre", 12),
    ("dezembro", 12),
    ("grudnia", 12),
    ("grudzień", 12),
];

/// The month whose name starts `rest` (longest name first, so "mars" is not read as "mar"),
/// with the number of bytes it took and an optional abbreviation dot.
fn month_name(rest: &str) -> Option<(u32, usize)> {
    let lower = rest.to_lowercase();
    let mut best: Option<(u32, usize)> = None;
    for (name, month) in MONTHS {
        if lower.starts_with(name) && best.is_none_or(|(_, len)| name.len() > len) {
            best = Some((*month, name.len()));
        }
    }
    let (month, lower_len) = best?;
    // Byte length in the original: lowercasing these names never changes their length except
    // for letters we do not use, so map by characters to stay on char boundaries.
    let chars = lower[..lower_len].chars().count();
    let mut len = rest.char_indices().nth(chars).map_or(rest.len(), |(i, _)| i);
    // The next letter must not continue a word: "mar" is not the start of "marketing".
    if rest[len..].chars().next().is_some_and(char::is_alphabetic) {
        return None;
    }
    if rest[len..].starts_with('.') {
        len += 1;
    }
    Some((month, len))
}

/// Up to `max` ASCII digits (at least one), and the bytes taken.
fn digits(rest: &str, max: usize) -> Option<(u32, usize)> {
    let len = rest.bytes().take(max).take_while(u8::is_ascii_digit).count();
    (len > 0).then(|| rest[..len].parse().ok().map(|n| (n, len))).flatten()
}

/// Python's `strptime` for the date directives templates use (`%d %m %y %Y %b %B %a %A %j`,
/// and the time ones, read and ignored). The whole value must be taken, as Python requires.
pub fn strptime(value: &str, format: &str) -> Option<Date> {
    let (mut year, mut month, mut day) = (None, None, None);
    let mut rest = value.trim();
    let mut fmt = format.trim().chars();
    while let Some(f) = fmt.next() {
        if f.is_whitespace() {
            rest = rest.trim_start();
            continue;
        }
        if f != '%' {
            let c = rest.chars().next()?;
            if !c.to_lowercase().eq(f.to_lowercase()) {
                return None;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let taken = match fmt.next()? {
            'd' | 'e' => digits(rest, 2).map(|(n, l)| (day = Some(n), l).1),
            'm' => digits(rest, 2).map(|(n, l)| (month = Some(n), l).1),
            'Y' => digits(rest, 4).map(|(n, l)| (year = Some(n as i32), l).1),
            'y' => digits(rest, 2).map(|(n, l)| {
                year = Some(if n < 69 { 2000 + n as i32 } else { 1900 + n as i32 });
                l
            }),
            'b' | 'B' | 'h' => month_name(rest).map(|(n, l)| (month = Some(n), l).1),
            'a' | 'A' => Some(rest.chars().take_while(|c| c.is_alphabetic()).map(char::len_utf8).sum::<usize>())
                .filter(|l| *l > 0)
                .map(|l| if rest[l..].starts_with('.') { l + 1 } else { l }),
            'H' | 'I' | 'M' | 'S' => digits(rest, 2).map(|(_, l)| l),
            'j' => digits(rest, 3).map(|(_, l)| l),
            'p' => ["am", "pm"].iter().any(|s| rest.to_ascii_lowercase().starts_with(s)).then_some(2),
            '%' => rest.starts_with('%').then_some(1),
            _ => None,
        }?;
        rest = &rest[taken..];
    }
    if !rest.trim().is_empty() {
        return None;
    }
    Date::new(year.unwrap_or(1900), month.unwrap_or(1), day.unwrap_or(1))
}

/// Whether numeric dates read day first: invoice2data's parser reads month first unless the
/// template names a language that writes the day first.
pub fn day_first(languages: &[String]) -> bool {
    languages.iter().any(|l| !l.eq_ignore_ascii_case("en"))
}

/// A date with no format that fits: `2022-09-27`, `27/09/2022` (or `09/27/2022`), `27.09.22`,
/// `27 septembre 2022`, `September 27, 2022`. An impossible reading in one order is tried in the
/// other (31/12 cannot be month first), as invoice2data's parser does.
pub fn loose_date(value: &str, day_first: bool) -> Option<Date> {
    let v = value.trim();
    for format in
        ["%Y-%m-%d", "%Y/%m/%d", "%Y.%m.%d", "%d %B %Y", "%d. %B %Y", "%B %d, %Y", "%B %d %Y", "%d-%b-%Y", "%d %b %y"]
    {
        if let Some(d) = strptime(v, format) {
            return Some(d);
        }
    }
    let parts: Vec<&str> = v.split(['/', '.', '-']).map(str::trim).collect();
    let [a, b, y] = parts.as_slice() else { return None };
    let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
    let year = match (y.len(), y.parse::<i32>().ok()?) {
        (4, y) => y,
        (2, y) if y < 69 => 2000 + y,
        (2, y) => 1900 + y,
        _ => return None,
    };
    let (first, second) = if day_first { ((b, a), (a, b)) } else { ((a, b), (b, a)) };
    Date::new(year, first.0, first.1).or_else(|| Date::new(year, second.0, second.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_follow_the_decimal_separator() {
        assert_eq!(number("1 234,56", ','), Some(1234.56));
        assert_eq!(number("1.234,56", ','), Some(1234.56));
        assert_eq!(number("1,234.56", '.'), Some(1234.56));
        assert_eq!(number("1'234.5", '.'), Some(1234.5));
        assert_eq!(number("-12.00", '.'), Some(-12.0));
        assert_eq!(number("1.2.3", '.'), None);
        assert_eq!(number("12 €", '.'), None);
        assert_eq!(number("", '.'), None);
        assert_eq!(number("inf", '.'), None);
    }

    #[test]
    fn strptime_reads_the_directives_templates_use() {
        let d = |y, m, d| Date::new(y, m, d);
        assert_eq!(strptime("2022-09-27", "%Y-%m-%d"), d(2022, 9, 27));
        assert_eq!(strptime("27/09/22", "%d/%m/%y"), d(2022, 9, 27));
        assert_eq!(strptime("September 7, 2021", "%B %d, %Y"), d(2021, 9, 7));
        assert_eq!(strptime("7 févr. 2021", "%d %b %Y"), d(2021, 2, 7));
        assert_eq!(strptime("15 März 2020", "%d %B %Y"), d(2020, 3, 15));
        assert_eq!(strptime("Mon, 3 Jan 2022", "%a, %d %b %Y"), d(2022, 1, 3));
        assert_eq!(strptime("2022-09-27 extra", "%Y-%m-%d"), None, "unconverted data remains");
        assert_eq!(strptime("2022-02-30", "%Y-%m-%d"), None);
        assert_eq!(strptime("marketing 2020", "%B %Y"), None);
    }

    #[test]
    fn loose_dates_try_the_other_order_when_one_is_impossible() {
        assert_eq!(loose_date("01/08/2024", false).map(Date::iso).as_deref(), Some("2024-01-08"));
        assert_eq!(loose_date("31/12/2024", false).map(Date::iso).as_deref(), Some("2024-12-31"));
        assert_eq!(loose_date("01/08/2024", true).map(Date::iso).as_deref(), Some("2024-08-01"));
        assert_eq!(loose_date("3 janvier 2023", true).map(Date::iso).as_deref(), Some("2023-01-03"));
        assert_eq!(loose_date("soon", true), None);
    }
}
