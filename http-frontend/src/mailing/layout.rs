//! The one layout of the pages for people (`/p/...`, `/forgot-password`) and of the administration
//! pages (`/admin/...`): maud templates, checked at compile time and HTML-escaped by default, in
//! English or French (a choice kept in the `courrier_lang` cookie, else `Accept-Language`). Every
//! control is a plain form, labelled, and the page fits a phone's width. The stylesheet is served
//! by the binary (`/assets/courrier.css`); the subscriber pages carry no script, the
//! administration pages one served script that only enhances (`/assets/admin.js`).

use axum::response::{Html, IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use maud::{DOCTYPE, Markup, html};

/// The language of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    En,
    Fr,
}

impl Lang {
    /// The reader's choice kept in the `courrier_lang` cookie, else the first of English and
    /// French in the client's `Accept-Language` order (by `q`, then by position); English when it
    /// names neither.
    pub fn of(headers: &HeaderMap) -> Self {
        let chosen = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find_map(|(name, value)| (name == LANG_COOKIE).then(|| Lang::parse(value.trim())).flatten());
        if let Some(lang) = chosen {
            return lang;
        }
        let Some(value) = headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok()) else { return Lang::En };
        let mut best: Option<(f32, usize, Lang)> = None;
        for (i, item) in value.split(',').enumerate().take(32) {
            let mut parts = item.split(';');
            let tag = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q=").and_then(|q| q.trim().parse::<f32>().ok()))
                .unwrap_or(1.0);
            let lang = match tag.split('-').next() {
                Some("fr") => Lang::Fr,
                Some("en") => Lang::En,
                _ => continue,
            };
            if q > 0.0 && best.is_none_or(|(bq, _, _)| q > bq) {
                best = Some((q, i, lang));
            }
        }
        best.map_or(Lang::En, |(_, _, l)| l)
    }

    /// `en` or `fr`.
    pub fn parse(code: &str) -> Option<Self> {
        match code {
            "en" => Some(Lang::En),
            "fr" => Some(Lang::Fr),
            _ => None,
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Fr => "fr",
        }
    }

    /// The text in this language.
    pub fn t(self, en: &'static str, fr: &'static str) -> &'static str {
        match self {
            Lang::En => en,
            Lang::Fr => fr,
        }
    }
}

/// The cookie that keeps the reader's choice of language (a preference, no authority).
pub const LANG_COOKIE: &str = "courrier_lang";

/// The pages' only style, served as `/assets/courrier.css` (no inline style, so the policy allows
/// only the installation's own): readable on a phone (no fixed width, nothing wider than the
/// screen), controls large enough to touch, visible focus; tables and the navigation of the
/// administration pages.
pub const STYLE: &str = "body{font-family:system-ui,sans-serif;line-height:1.5;margin:0;padding:1rem;color:#1a1a1a;background:#fff}\
main{max-width:36rem;margin:0 auto}main.wide{max-width:72rem}h1{font-size:1.5rem}h2{font-size:1.15rem;margin:1rem 0 .25rem}\
label{display:block;font-weight:600;margin:.75rem 0 .25rem}input,select,button,textarea{font:inherit;max-width:100%;box-sizing:border-box}\
input,select,textarea{width:100%;padding:.5rem;border:1px solid #555;border-radius:4px}input[type=checkbox]{width:auto}\
button{padding:.5rem 1rem;margin-top:.75rem;border:1px solid #1d4ed8;border-radius:4px;background:#1d4ed8;color:#fff;cursor:pointer}\
button.secondary{background:#fff;color:#1d4ed8}button.danger{background:#fff;color:#a00000;border-color:#a00000}\
:focus{outline:3px solid #f59e0b;outline-offset:2px}\
ul.subs{list-style:none;padding:0}ul.subs>li{border:1px solid #ccc;border-radius:6px;padding:.75rem;margin:.75rem 0}\
.note{color:#444}.alert{color:#a00000;font-weight:600}p,td,th,dd{overflow-wrap:anywhere}\
header.bar{max-width:72rem;margin:0 auto .5rem;border-bottom:1px solid #ccc}\
nav ul{list-style:none;padding:0;margin:0;display:flex;flex-wrap:wrap;gap:.25rem 1rem}nav a{color:#1d4ed8}\
nav a[aria-current=page]{font-weight:700;color:#1a1a1a}.bar form{display:inline}.bar button{margin:0 0 .5rem}\
table{border-collapse:collapse;width:100%;margin:.5rem 0}th,td{border-bottom:1px solid #ddd;padding:.35rem;text-align:left;vertical-align:top}\
dl{display:grid;grid-template-columns:fit-content(40%) minmax(0,1fr);gap:.25rem 1rem}dt{font-weight:600}dd{margin:0}\
code,pre{background:#f3f3f3;padding:.1rem .25rem;overflow-wrap:anywhere;white-space:pre-wrap}\
fieldset{border:1px solid #ccc;border-radius:6px;margin:1rem 0;padding:.5rem 1rem}legend{font-weight:700}\
.row{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:end}.row>*{flex:1 1 12rem}.row>button{flex:0 0 auto}\
.ok{color:#166534;font-weight:600}.bad{color:#a00000;font-weight:600}.secret{font-size:1.1rem}";

/// The administration pages' frame: the navigation, and the served script that enhances them.
pub struct Frame {
    pub nav: Markup,
}

/// A whole page: `lang`, a `<title>` (the heading too), the body, and the headers every page
/// carries (no caching: a token may be in the URL; no referrer; no framing).
pub fn page(lang: Lang, status: StatusCode, title: &str, body: Markup) -> Response {
    framed(lang, status, title, None, body)
}

/// A whole page, in the administration frame when `frame` is given: its navigation, a wider main
/// column and the served script (`script-src 'self'`; the subscriber pages allow no script).
pub fn framed(lang: Lang, status: StatusCode, title: &str, frame: Option<Frame>, body: Markup) -> Response {
    let admin = frame.is_some();
    let markup = html! {
        (DOCTYPE)
        html lang=(lang.code()) {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (title) " · Courrier" }
                link rel="stylesheet" href="/assets/courrier.css";
                @if admin { script src="/assets/admin.js" defer {} }
            }
            body {
                @if let Some(f) = frame {
                    header class="bar" { (f.nav) }
                }
                main class=[admin.then_some("wide")] {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    let mut resp = (status, Html(markup.into_string())).into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(if admin {
            "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        } else {
            "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        }),
    );
    resp
}

/// The page of a link that does not work (unknown, used or expired: not told apart).
pub fn invalid_link(lang: Lang) -> Response {
    page(
        lang,
        StatusCode::NOT_FOUND,
        lang.t("Link not valid", "Lien non valable"),
        html! { p { (lang.t(
            "This link is not valid: it was used already, it expired, or it was mistyped.",
            "Ce lien n'est pas valable : il a déjà servi, il a expiré, ou il a été mal recopié.",
        )) } },
    )
}

/// The HTML 404 page of an unknown page under `/p/` or `/admin/`.
pub fn not_found(lang: Lang) -> Response {
    page(
        lang,
        StatusCode::NOT_FOUND,
        lang.t("Page not found", "Page introuvable"),
        html! { p { (lang.t("There is no such page here.", "Il n'y a pas de telle page ici.")) } },
    )
}

/// A "see other" answer to a form, back to `to` (the Post/Redirect/Get pattern).
pub fn see_other(to: &'static str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    resp.headers_mut().insert(header::LOCATION, HeaderValue::from_static(to));
    resp
}

/// [`see_other`] to a path made at run time (escaped by its maker; a bad header value goes to `/`).
pub fn see_other_to(to: &str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    let value = HeaderValue::from_str(to).unwrap_or_else(|_| HeaderValue::from_static("/"));
    resp.headers_mut().insert(header::LOCATION, value);
    resp
}

/// A short message (`role="status"`), or an error (`role="alert"`).
pub fn note(text: &str) -> Markup {
    html! { p class="note" role="status" { (text) } }
}

pub fn alert(text: &str) -> Markup {
    html! { p class="alert" role="alert" { (text) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lang(value: &str) -> Lang {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT_LANGUAGE, value.parse().unwrap());
        Lang::of(&h)
    }

    #[test]
    fn the_language_follows_accept_language() {
        assert_eq!(Lang::of(&HeaderMap::new()), Lang::En);
        assert_eq!(lang("fr-FR,fr;q=0.9,en;q=0.8"), Lang::Fr);
        assert_eq!(lang("de-DE,de;q=0.9,fr;q=0.5,en;q=0.4"), Lang::Fr);
        assert_eq!(lang("en-GB,fr;q=0.9"), Lang::En);
        assert_eq!(lang("fr;q=0.2,en;q=0.8"), Lang::En);
        assert_eq!(lang("de"), Lang::En);
        assert_eq!(lang("fr;q=0"), Lang::En);
    }

    #[test]
    fn a_language_chosen_in_the_cookie_wins() {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT_LANGUAGE, "en-GB".parse().unwrap());
        h.insert(header::COOKIE, "a=1; courrier_lang=fr".parse().unwrap());
        assert_eq!(Lang::of(&h), Lang::Fr);
        h.insert(header::COOKIE, "courrier_lang=de".parse().unwrap());
        assert_eq!(Lang::of(&h), Lang::En);
    }

    #[tokio::test]
    async fn text_is_escaped() {
        let resp = page(Lang::En, StatusCode::OK, "<b>x</b>", html! { p { ("<script>alert(1)</script>") } });
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert!(!body.contains("<script>") && body.contains("&lt;script&gt;"), "{body}");
        assert!(body.contains("<html lang=\"en\">") && body.contains("<title>&lt;b&gt;x&lt;/b&gt; · Courrier</title>"));
    }
}
