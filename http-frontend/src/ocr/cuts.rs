//! `POST /api/ocrcuts` (zones read, or confirmed) and `POST /api/ocrcutszones` (zones learned for
//! a supplier), in every request shape ScanInvoices and the contract use.

use super::input::{self, Input};
use super::reply::{OcrError, ok};
use super::{JSON_LIMITS, gate};
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::response::Response;
use courrier_core::kernel::Code;
use courrier_core::ocr::cuts::{self, Cut, CutRequest, CutResult, Reading};
use courrier_core::ocr::engine::Language;
use courrier_core::ocr::zones::{Ratio, Zone, ZoneError};
use http::Method;
use serde_json::{Map, Value, json};

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(Code::ValidationFailed, msg)
}

fn zone_error(e: ZoneError) -> ApiError {
    invalid(e.to_string())
}

/// A field holding a JSON object, sent as an object or as a string of JSON (form posts).
fn object_field(input: &Input, name: &str) -> Result<Option<Map<String, Value>>, ApiError> {
    let Some(raw) = input.text(name) else { return Ok(None) };
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(o)) => Ok(Some(o)),
        _ => Err(invalid(format!("{name} is not a JSON object"))),
    }
}

fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `jsonRect`: `{"fournisseurRect": "x:y:w:h", ...}` -> named zones, names without `Rect`.
fn named_zones(rects: &Map<String, Value>) -> Result<Vec<(String, Zone)>, ApiError> {
    rects
        .iter()
        .map(|(key, v)| {
            let name = key.strip_suffix("Rect").unwrap_or(key).to_owned();
            let rect = text_of(v).ok_or_else(|| invalid(format!("jsonRect.{key} is not an x:y:w:h text")))?;
            Ok((name, Zone::parse(&rect).map_err(zone_error)?))
        })
        .collect()
}

fn cut_request(input: &Input) -> Result<CutRequest, ApiError> {
    let ocr_id = input.require("ocrID")?.to_owned();
    // Absent (ScanInvoices' rect and confirmvalues): the document's own language, found in core.
    let lang = match input.text("lang") {
        None => None,
        Some(raw) => Some(
            Language::parse(raw)
                .ok_or_else(|| invalid(format!("lang {raw:?} is not one of fr, de, it, en (or fra, deu, ita, eng)")))?,
        ),
    };
    let ratio = Ratio::parse(input.require("ratio")?).map_err(zone_error)?;
    let page = match input.text("page") {
        None => 1,
        Some(raw) => raw
            .parse::<u32>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| invalid(format!("page {raw:?} is not a page number from 1")))?,
    };
    let json_rect = object_field(input, "jsonRect")?;
    let rect = input.text("rect");
    let action = input.text("action").unwrap_or("");
    let cut = if action.is_empty() || action.eq_ignore_ascii_case("default") || action.eq_ignore_ascii_case("rect") {
        let rect = rect.ok_or_else(|| invalid("the field rect is required (x:y:w:h)"))?;
        Cut::Read(Reading::One(Zone::parse(rect).map_err(zone_error)?))
    } else if action.eq_ignore_ascii_case("multicut") {
        match (&json_rect, rect) {
            (Some(rects), _) => Cut::Read(Reading::Named(named_zones(rects)?)),
            (None, Some(rect)) => Cut::Read(Reading::Many(
                rect.split(';')
                    .filter(|r| !r.trim().is_empty())
                    .map(Zone::parse)
                    .collect::<Result<_, _>>()
                    .map_err(zone_error)?,
            )),
            (None, None) => return Err(invalid("multicut needs rect (zones joined by ;) or jsonRect")),
        }
    } else if action.eq_ignore_ascii_case("confirmvalues") {
        confirmation(input, json_rect.as_ref(), ratio)?
    } else {
        return Err(invalid(format!("action {action:?} is not one of rect, multicut, confirmvalues")));
    };
    Ok(CutRequest { ocr_id, ratio, page, lang, cut })
}

/// `jsonRect` + `jsonConfirmValues` (`{name: value}`), or `values` (`{field: {value, rect, ratio}}`).
fn confirmation(input: &Input, json_rect: Option<&Map<String, Value>>, ratio: Ratio) -> Result<Cut, ApiError> {
    let mut zones = Vec::new();
    let mut values = Vec::new();
    if let Some(rects) = json_rect {
        zones.extend(named_zones(rects)?.into_iter().map(|(n, z)| (n, z, ratio)));
        for (k, v) in object_field(input, "jsonConfirmValues")?.unwrap_or_default() {
            values.push((k.strip_suffix("Rect").unwrap_or(&k).to_owned(), text_of(&v).unwrap_or_default()));
        }
    }
    for (field, spec) in object_field(input, "values")?.unwrap_or_default() {
        let Value::Object(spec) = spec else {
            return Err(invalid(format!("values.{field} is not an object {{value, rect, ratio}}")));
        };
        let value = spec.get("value").and_then(text_of).unwrap_or_default();
        if let Some(rect) = spec.get("rect").and_then(text_of).filter(|r| !r.trim().is_empty()) {
            let own = match spec.get("ratio").and_then(text_of) {
                Some(r) => Ratio::parse(&r).map_err(zone_error)?,
                None => ratio,
            };
            zones.push((field.clone(), Zone::parse(&rect).map_err(zone_error)?, own));
        }
        values.push((field, value));
    }
    if zones.is_empty() {
        return Err(invalid("confirmvalues needs jsonRect with jsonConfirmValues, or values with their rects"));
    }
    Ok(Cut::Confirm { zones, values })
}

fn result_text(result: &CutResult) -> String {
    match result {
        CutResult::Text(t) => json!({ "texte": t }).to_string(),
        CutResult::Texts(list) => json!(list).to_string(),
        CutResult::Named(list) => {
            Value::Object(list.iter().map(|(n, t)| (n.clone(), Value::from(t.clone()))).collect()).to_string()
        }
        CutResult::Confirmed { supplier, zones } => json!({
            "confirmed": zones,
            "supplier": {
                "id": supplier.id.get(),
                "name": supplier.name,
                "numeroTvaIntra": supplier.vat_number.as_ref().map(|v| v.as_str()).unwrap_or(""),
            },
        })
        .to_string(),
    }
}

pub async fn post_cuts(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    req: Request,
) -> Result<Response, OcrError> {
    gate(&state, &Method::POST).await?;
    let input = input::read(req, &state, JSON_LIMITS).await?;
    let request = cut_request(&input)?;
    let ocr_id = request.ocr_id.clone();
    let app = state.ocr.clone();
    let result = run_blocking(move || cuts::cut(&app, &p, &ctx, request).map_err(ApiError::from)).await?;
    let success = match result {
        CutResult::Confirmed { .. } => "zones confirmed for the supplier",
        _ => "zones read",
    };
    Ok(ok(&json!({
        "ocrID": ocr_id,
        "success": success,
        "message": "",
        "errors": "",
        "result": result_text(&result),
        "meta": "",
    })))
}

pub async fn post_zones(State(state): State<AppState>, Auth(_p): Auth, req: Request) -> Result<Response, OcrError> {
    gate(&state, &Method::POST).await?;
    let input = input::read(req, &state, JSON_LIMITS).await?;
    input.require_strings(&["name", "vatNumber", "vat", "objectType"])?;
    for field in ["name", "vatNumber", "vat"] {
        if input.get(field).is_some_and(|v| v.chars().any(char::is_control) || v.chars().count() > 200) {
            return Err(invalid(format!("{field} must be at most 200 characters without control characters")).into());
        }
    }
    let name = input.text("name").map(str::to_owned);
    let vat = input.text("vatNumber").or_else(|| input.text("vat")).map(str::to_owned);
    if name.is_none() && vat.is_none() {
        return Err(invalid("name or vatNumber is required").into());
    }
    if let Some(kind) = input.text("objectType")
        && !kind.eq_ignore_ascii_case("invoices")
    {
        return Err(invalid(format!("objectType {kind:?} is not invoices")).into());
    }
    let app = state.ocr.clone();
    let found =
        run_blocking(move || cuts::learned_zones(&app, name.as_deref(), vat.as_deref()).map_err(ApiError::from))
            .await?;
    let (message, result) = match found {
        None => ("unknown supplier", json!({})),
        Some((supplier, zones)) => {
            let mut result = Map::new();
            result.insert("ratio".into(), "1".into());
            for z in &zones {
                result.insert(format!("{}Rect", z.name), z.rect.as_text().into());
            }
            let list: Vec<Value> = zones
                .iter()
                .map(|z| json!({ "name": z.name, "rect": z.rect.as_text(), "page": z.page, "confirmations": z.confirmations }))
                .collect();
            result.insert("zones".into(), Value::Array(list));
            result.insert("supplier".into(), json!({ "id": supplier.id.get(), "name": supplier.name }));
            ("zones learned for the supplier", Value::Object(result))
        }
    };
    Ok(ok(&json!({ "success": "zones", "message": message, "errors": "", "result": result })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(fields: &[(&str, &str)]) -> Input {
        let mut i = Input::default();
        for (k, v) in fields {
            i.push_field(k, v);
        }
        i
    }

    #[test]
    fn every_request_shape_becomes_one_cut() {
        let base = [("ocrID", "x"), ("lang", "fr"), ("ratio", "2")];
        let one = cut_request(&input(&[&base[..], &[("rect", "1:2:3:4")]].concat())).unwrap();
        assert!(matches!(one.cut, Cut::Read(Reading::One(_))));
        let many = cut_request(&input(&[&base[..], &[("action", "multicut"), ("rect", "1:2:3:4;5:6:7:8;")]].concat()))
            .unwrap();
        assert!(matches!(many.cut, Cut::Read(Reading::Many(ref z)) if z.len() == 2));
        let named = cut_request(&input(
            &[
                &base[..],
                &[("action", "multicut"), ("jsonRect", r#"{"totalttcRect":"1:1:9:9","factureRect":"2:2:5:5"}"#)],
            ]
            .concat(),
        ))
        .unwrap();
        assert!(matches!(named.cut, Cut::Read(Reading::Named(ref z)) if z.iter().any(|(n, _)| n == "totalttc")));
        let confirm = cut_request(&input(
            &[
                &base[..],
                &[
                    ("action", "confirmvalues"),
                    ("jsonRect", r#"{"fournisseurRect":"1:1:9:9"}"#),
                    ("jsonConfirmValues", r#"{"fournisseur":"ACME"}"#),
                ],
            ]
            .concat(),
        ))
        .unwrap();
        assert!(
            matches!(confirm.cut, Cut::Confirm { ref values, .. } if values[0] == ("fournisseur".into(), "ACME".into()))
        );
        let values = cut_request(&input(
            &[
                &base[..],
                &[
                    ("action", "confirmvalues"),
                    ("values", r#"{"amount":{"value":"12.00","rect":"1:1:4:4","ratio":"0.5"}}"#),
                ],
            ]
            .concat(),
        ))
        .unwrap();
        assert!(matches!(values.cut, Cut::Confirm { ref zones, .. } if zones[0].2.get() == 0.5));
    }

    #[test]
    fn bad_cut_requests_say_why() {
        let base = [("ocrID", "x"), ("lang", "fr"), ("ratio", "1")];
        for (extra, needle) in [
            (vec![], "rect is required"),
            (vec![("rect", "0:0:0:5")], "empty"),
            (vec![("rect", "a:b")], "x:y:w:h"),
            (vec![("rect", "1:1:1:1"), ("action", "erase")], "not one of"),
            (vec![("action", "multicut")], "multicut needs"),
            (vec![("action", "multicut"), ("jsonRect", "[1]")], "not a JSON object"),
            (vec![("action", "confirmvalues")], "confirmvalues needs"),
            (vec![("rect", "1:1:1:1"), ("page", "0")], "page"),
        ] {
            let err = cut_request(&input(&[&base[..], &extra[..]].concat())).map(|_| ()).unwrap_err();
            assert!(err.message.contains(needle), "{extra:?}: {}", err.message);
        }
        let err = cut_request(&input(&[("ocrID", "x"), ("lang", "fr"), ("ratio", "0"), ("rect", "1:1:1:1")]))
            .map(|_| ())
            .unwrap_err();
        assert!(err.message.contains("ratio"), "{}", err.message);
    }
}
