//! GNU Mailman 3 core's REST API, the baseline of bench-members and bench-sends: what both do
//! with it (a list on `example.com`, members added pre-approved without a welcome message).

use crate::{Api, check_status};

/// Fails unless Mailman answers `GET /3.1/system/versions` with 200.
pub fn check_reachable(api: &Api) -> Result<(), String> {
    let (status, body) =
        api.get("/3.1/system/versions").map_err(|e| format!("Mailman not reachable at {}: {e}", api.base))?;
    check_status("Mailman GET /3.1/system/versions", status, &body, &[200])
}

/// The list `{list}@example.com` (a new one: 201 only), on the domain `example.com` (which an
/// earlier run may have made), its configuration patched with `config`.
pub fn create_list(api: &Api, list: &str, config: &[(&str, &str)]) -> Result<(), String> {
    let (status, body) = api.form("POST", "/3.1/domains", &[("mail_host", "example.com")])?;
    // 400: the domain exists already (an earlier run).
    check_status("Mailman POST /3.1/domains", status, &body, &[201, 400])?;
    let fqdn = format!("{list}@example.com");
    let (status, body) = api.form("POST", "/3.1/lists", &[("fqdn_listname", &fqdn)])?;
    check_status("Mailman POST /3.1/lists", status, &body, &[201])?;
    let (status, body) = api.form("PATCH", &format!("/3.1/lists/{list}.example.com/config"), config)?;
    check_status("Mailman PATCH list config", status, &body, &[204])
}

/// Subscribes `email` to the list `list_id` (`name.example.com`) verified, confirmed and
/// approved beforehand, without a welcome message.
pub fn add_member(api: &Api, list_id: &str, email: &str, display_name: Option<&str>) -> Result<(), String> {
    let mut fields = vec![("list_id", list_id), ("subscriber", email)];
    if let Some(name) = display_name {
        fields.push(("display_name", name));
    }
    fields.extend([
        ("pre_verified", "True"),
        ("pre_confirmed", "True"),
        ("pre_approved", "True"),
        ("send_welcome_message", "False"),
    ]);
    let (status, body) = api.form("POST", "/3.1/members", &fields)?;
    check_status("Mailman POST /3.1/members", status, &body, &[201])
}
