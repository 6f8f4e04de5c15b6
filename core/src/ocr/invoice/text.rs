//! Text normalisation for matching labels: lower case, accents dropped, one char for one char,
//! so a position found in the folded text is the same position in the original.

/// `fold("Échéance")` is `"echeance"`; every char maps to exactly one char.
pub fn fold(s: &str) -> String {
    s.chars().map(fold_char).collect()
}

pub fn fold_char(c: char) -> char {
    let c = c.to_lowercase().next().unwrap_or(c);
    match c {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'ą' => 'a',
        'ç' | 'ć' => 'c',
        'è' | 'é' | 'ê' | 'ë' | 'ę' => 'e',
        'ì' | 'í' | 'î' | 'ï' => 'i',
        'ł' => 'l',
        'ñ' | 'ń' => 'n',
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' => 'o',
        'ś' => 's',
        'ù' | 'ú' | 'û' | 'ü' => 'u',
        'ÿ' | 'ý' => 'y',
        'ź' | 'ż' => 'z',
        'ß' => 's',
        '’' | '`' | '´' => '\'',
        '\u{a0}' | '\u{202f}' | '\t' => ' ',
        // "N°123" reads as "n 123": the label ends where the number starts.
        '°' | 'º' => ' ',
        c => c,
    }
}

/// Whether the char at byte `i` of `s` (or the end) is a word boundary on that side.
pub fn boundary_before(s: &str, i: usize) -> bool {
    s[..i].chars().next_back().is_none_or(|c| !c.is_alphanumeric())
}

pub fn boundary_after(s: &str, i: usize) -> bool {
    s[i..].chars().next().is_none_or(|c| !c.is_alphanumeric())
}

/// Byte offset in `original` of the char at byte offset `folded_at` of `fold(original)`.
pub fn original_offset(original: &str, folded_at: usize) -> usize {
    let mut folded_len = 0;
    for (i, c) in original.char_indices() {
        if folded_len >= folded_at {
            return i;
        }
        folded_len += fold_char(c).len_utf8();
    }
    original.len()
}

/// Every occurrence of the word-bounded `needle` (already folded) in folded `hay`.
pub fn find_word(hay: &str, needle: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = hay.get(from..).and_then(|h| h.find(needle)) {
        let at = from + i;
        if boundary_before(hay, at) && boundary_after(hay, at + needle.len()) {
            out.push(at);
        }
        from = at + needle.len().max(1);
        while !hay.is_char_boundary(from) && from < hay.len() {
            from += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_keeps_positions() {
        let s = "Date d’Échéance : 13/12/2017";
        let f = fold(s);
        assert_eq!(f, "date d'echeance : 13/12/2017");
        let at = f.find("13/").unwrap();
        assert_eq!(&s[original_offset(s, at)..], "13/12/2017");
        assert_eq!(find_word("total ttc total", "total"), vec![0, 10]);
        assert_eq!(fold("N°562"), "n 562");
        assert!(find_word("subtotal", "total").is_empty());
    }
}
