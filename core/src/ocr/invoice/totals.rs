//! Gross, net and VAT chosen together: the invoice profile's local enhancements. A combination
//! must hold net <= gross and net + VAT = gross within rounding; the VAT breakdown (one row per
//! rate) must sum to the VAT. A candidate that breaks them gives way to the next best.

use super::amounts;
use super::fields::Candidate;
use super::layout::Layout;
use super::meta::{Amount, Found, TaxLine};
use super::text::fold;

/// Rounding allowed between a total and the sum of its parts, in cents (one per rate or line).
const ROUNDING_CENTS: i64 = 2;

/// The highest VAT (or GST) rate an invoice's tax can be of its net, in percent: EU standard
/// rates stop at 27 %, India's GST at 28 %. Net and tax swapped add up to the same gross; this
/// is what tells them apart.
const MAX_RATE_PERCENT: i64 = 30;

/// Whether `tax` can be the VAT of `net`.
fn plausible_tax(net: Amount, tax: Amount) -> bool {
    tax.abs().ten_thousandths() * 100 <= net.abs().ten_thousandths() * MAX_RATE_PERCENT + ROUNDING_CENTS * 100 * 100
}

/// Rows that state a VAT rate and its amount (`TVA 20 %   81,90   16,38`): the rate, and the tax
/// as the amount that the rate of another amount on the row gives (else the row's only amount).
pub fn breakdown(layout: &Layout) -> Vec<TaxLine> {
    const TAX_WORDS: &[&str] = &["tva", "vat", "mwst", "ust", "iva", "btw", "tax", "steuer", "imposta", "taxe"];
    let mut lines: Vec<TaxLine> = Vec::new();
    for row in &layout.rows {
        let text = row.text();
        let folded = fold(&text);
        if !TAX_WORDS.iter().any(|w| !super::text::find_word(&folded, w).is_empty() || folded.contains(w)) {
            continue;
        }
        let Some(&(rate_at, rate)) = amounts::percents(&text).first() else { continue };
        let found: Vec<Amount> =
            amounts::find_all(&text).into_iter().filter(|(at, _)| *at > rate_at).map(|(_, a)| a).collect();
        let mut line = None;
        'pairs: for (i, &base) in found.iter().enumerate() {
            for (j, &tax) in found.iter().enumerate() {
                // Compared by magnitude: OCR drops a credit note's minus signs; the tax takes the
                // base's sign.
                if i != j && base.percent(rate).abs().close_to(tax.abs(), ROUNDING_CENTS) && base.abs() >= tax.abs() {
                    let amount =
                        if (base < Amount::ZERO) == (tax < Amount::ZERO) { tax } else { Amount::ZERO.minus(tax) };
                    line = Some(TaxLine { rate, base: Some(base), amount, confidence: 0.9 * row.confidence() });
                    break 'pairs;
                }
            }
        }
        // One amount alone is the tax only when nothing else on the row looks like a number (a
        // misread "-4,10" as "410" must not leave the base to pass for the tax).
        let after_rate = &text[rate_at..];
        let numbers = after_rate
            .split(|c: char| !c.is_ascii_digit() && c != ',' && c != '.')
            .filter(|t| t.chars().any(|c| c.is_ascii_digit()))
            .count();
        if line.is_none() && found.len() == 1 && numbers <= 2 && rate.ten_thousandths() > 0 {
            line = Some(TaxLine { rate, base: None, amount: found[0], confidence: 0.5 * row.confidence() });
        }
        if let Some(l) = line
            && !lines.iter().any(|t| t.rate == l.rate)
        {
            lines.push(l);
        }
    }
    lines.truncate(4);
    lines
}

/// The chosen totals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub gross: Option<Found<Amount>>,
    pub net: Option<Found<Amount>>,
    pub tax: Option<Found<Amount>>,
}

fn top(mut c: Vec<Candidate<Amount>>) -> Vec<Candidate<Amount>> {
    // One entry per value, its best score.
    c.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut out: Vec<Candidate<Amount>> = Vec::new();
    for x in c {
        if !out.iter().any(|o| o.value == x.value) {
            out.push(x);
        }
    }
    out.truncate(6);
    out
}

/// Picks gross, net and VAT among their candidates (and the breakdown's sum) so that the rules
/// hold, maximising the summed scores; a complete, consistent triple earns a bonus.
pub fn choose(
    gross: Vec<Candidate<Amount>>,
    payable: Vec<Candidate<Amount>>,
    net: Vec<Candidate<Amount>>,
    tax: Vec<Candidate<Amount>>,
    rates: &[TaxLine],
) -> Totals {
    let mut gross = top(gross);
    // What remains to pay is the gross when no deposit was paid: a weaker candidate.
    for p in top(payable) {
        if !gross.iter().any(|g| g.value == p.value) {
            gross.push(Candidate { score: p.score * 0.6, ..p });
        }
    }
    let mut tax = top(tax);
    // Credit notes print negative totals; OCR loses a minus sign easily. A tax of the opposite
    // sign is a weaker candidate, kept only if it makes the totals agree.
    if gross.iter().chain(net.iter()).any(|c| c.value < Amount::ZERO) {
        let flipped: Vec<Candidate<Amount>> = tax
            .iter()
            .filter(|t| t.value > Amount::ZERO)
            .map(|t| Candidate { value: Amount::ZERO.minus(t.value), score: t.score * 0.9, row: t.row })
            .collect();
        tax.extend(flipped);
    }
    let breakdown_sum = (!rates.is_empty()).then(|| rates.iter().fold(Amount::ZERO, |s, t| s.plus(t.amount)));
    if let Some(sum) = breakdown_sum
        && !tax.iter().any(|t| t.value == sum)
    {
        let conf = rates.iter().map(|t| t.confidence).fold(1.0f32, f32::min);
        tax.push(Candidate { value: sum, score: 0.5 * conf, row: usize::MAX });
    }
    let net = top(net);
    let opt = |v: &[Candidate<Amount>]| -> Vec<Option<Candidate<Amount>>> {
        std::iter::once(None).chain(v.iter().cloned().map(Some)).collect()
    };
    let mut best: Option<(f32, Totals)> = None;
    for g in opt(&gross) {
        for n in opt(&net) {
            for t in opt(&tax) {
                let (gv, nv, tv) =
                    (g.as_ref().map(|c| c.value), n.as_ref().map(|c| c.value), t.as_ref().map(|c| c.value));
                if let (Some(g), Some(n)) = (gv, nv)
                    && n > g
                {
                    continue;
                }
                if let (Some(g), Some(n), Some(t)) = (gv, nv, tv)
                    && !n.plus(t).close_to(g, ROUNDING_CENTS)
                {
                    continue;
                }
                if let (Some(g), Some(t)) = (gv, tv)
                    && t.abs() > g.abs()
                {
                    continue;
                }
                // The tax stated, or the one the gross and the net imply (and the net the gross and
                // the tax imply), must be a VAT of that net.
                let implied = match (gv, nv, tv) {
                    (_, Some(n), Some(t)) => Some((n, t)),
                    (Some(g), Some(n), None) => Some((n, g.minus(n))),
                    (Some(g), None, Some(t)) => Some((g.minus(t), t)),
                    _ => None,
                };
                if implied.is_some_and(|(n, t)| !plausible_tax(n, t)) {
                    continue;
                }
                let mut score: f32 = [&g, &n, &t].iter().map(|c| c.as_ref().map_or(0.0, |c| c.score)).sum();
                if gv.is_some() && nv.is_some() && tv.is_some() {
                    score += 1.0;
                }
                if let (Some(sum), Some(t)) = (breakdown_sum, tv)
                    && sum.close_to(t, ROUNDING_CENTS)
                {
                    score += 0.3;
                }
                // Net and VAT agreeing with a VAT rate of the breakdown.
                if best.as_ref().is_none_or(|(s, _)| score > *s) {
                    let f = |c: &Option<Candidate<Amount>>, boost: f32| {
                        c.as_ref().map(|c| Found::new(c.value, (c.score + boost).min(1.0)))
                    };
                    let boost = if gv.is_some() && nv.is_some() && tv.is_some() { 0.2 } else { 0.0 };
                    best = Some((score, Totals { gross: f(&g, boost), net: f(&n, boost), tax: f(&t, boost) }));
                }
            }
        }
    }
    let mut totals = best.map(|(_, t)| t).unwrap_or_default();
    // Two of three determine the third.
    match (&totals.gross, &totals.net, &totals.tax) {
        (Some(g), Some(n), None) if rates.is_empty() && g.value == n.value => {
            totals.tax = Some(Found::new(Amount::ZERO, g.confidence.min(n.confidence) * 0.8));
        }
        (Some(g), Some(n), None)
            if rates.is_empty() || breakdown_sum.is_some_and(|s| n.value.plus(s).close_to(g.value, ROUNDING_CENTS)) =>
        {
            totals.tax = Some(Found::new(g.value.minus(n.value), g.confidence.min(n.confidence) * 0.8));
        }
        (Some(g), None, Some(t)) if t.value.abs() <= g.value.abs() => {
            totals.net = Some(Found::new(g.value.minus(t.value), g.confidence.min(t.confidence) * 0.8));
        }
        (None, Some(n), Some(t)) => {
            totals.gross = Some(Found::new(n.value.plus(t.value), n.confidence.min(t.confidence) * 0.8));
        }
        _ => {}
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(v: &str, score: f32) -> Candidate<Amount> {
        Candidate { value: Amount::parse_machine(v).unwrap(), score, row: 0 }
    }

    #[test]
    fn an_inconsistent_candidate_gives_way_to_the_next_best() {
        // The OCR read the gross 720.00 (a 7 for a 1): net + VAT = 671.15 wins over it.
        let t = choose(
            vec![c("720.00", 1.0), c("671.15", 0.5)],
            vec![],
            vec![c("624.90", 1.0)],
            vec![c("46.25", 1.0)],
            &[],
        );
        assert_eq!(t.gross.unwrap().value.to_string(), "671.15");
        // A net above the gross is refused.
        let t = choose(vec![c("100.00", 1.0)], vec![], vec![c("120.00", 1.0), c("80.00", 0.4)], vec![], &[]);
        assert_eq!(t.net.unwrap().value.to_string(), "80.00");
        assert_eq!(t.tax.unwrap().value.to_string(), "20.00");
    }

    #[test]
    fn german_invoice_net_and_tax_are_not_swapped() {
        // "Netto" and "MwSt." each took the other's value more surely than its own: both orders
        // add up to the gross; a tax of more than 30 % of the net is no VAT.
        let t = choose(
            vec![c("1190.00", 1.0)],
            vec![],
            vec![c("190.00", 1.0), c("1000.00", 0.6)],
            vec![c("1000.00", 1.0), c("190.00", 0.6)],
            &[],
        );
        assert_eq!(t.net.unwrap().value.to_string(), "1000.00");
        assert_eq!(t.tax.unwrap().value.to_string(), "190.00");
        // Nor a tax the gross and a wrong net imply.
        let t = choose(
            vec![c("119.00", 1.0)],
            vec![],
            vec![c("19.00", 1.0), c("100.00", 0.5)],
            vec![c("100.00", 1.0)],
            &[],
        );
        assert_eq!(t.net.unwrap().value.to_string(), "100.00");
        assert_eq!(t.tax.unwrap().value.to_string(), "19.00");
    }

    #[test]
    fn breakdown_rows_give_rate_base_and_tax() {
        let layout = Layout::from_words(&crate::ocr::invoice::words::from_layout_text(
            "TVA collectée (vente) 20,0%       81,90 €      16,38 €\nTVA 5,5%    543,00 €    29,87 €\nNougat  4,55 €  10%  81,90 €",
        ));
        let lines = breakdown(&layout);
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].rate.to_string(), lines[0].amount.to_string()), ("20.00".into(), "16.38".into()));
        assert_eq!(lines[1].amount.to_string(), "29.87");
        let credit = breakdown(&Layout::from_words(&crate::ocr::invoice::words::from_layout_text(
            "TVA collectée (vente) 20,0%   -20,48 €   4,10€   Total taxes   €",
        )));
        assert_eq!(credit[0].amount.to_string(), "-4.10");
    }
}
