//! The command line's administration (issue 24): every command run as the operator against the
//! data directory of a running `courrier serve`, each checked through the API; the shapes every
//! command shares (one JSON document with `--json`, exit codes, nothing on stdout on an error);
//! completions and the manual page.

use courrier_tests::harness::{ProcessApp, Resp, run_cli, run_cli_in};
use serde_json::Value;
use std::collections::HashMap;

const ADMIN: &str = "admin@example.org";
const PASSWORD: &str = "a long enough passphrase";

/// The running server seen through its API, with a site administrator's key.
struct Api<'a> {
    app: &'a ProcessApp,
    key: String,
}

impl Api<'_> {
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Resp {
        let auth = format!("Bearer {}", self.key);
        let mut headers = vec![("authorization", auth.as_str())];
        let bytes = body.map(Value::to_string);
        if bytes.is_some() {
            headers.push(("content-type", "application/json"));
        }
        self.app.client.request(method, path, &headers, bytes.as_deref().map(str::as_bytes))
    }

    /// The `data` of a GET answering 200.
    fn get(&self, path: &str) -> Value {
        let r = self.call("GET", path, None);
        assert_eq!(r.status, 200, "GET {path}: {}", r.body);
        r.json()["data"].clone()
    }

    fn status(&self, path: &str) -> u16 {
        self.call("GET", path, None).status
    }

    fn user_id(&self, email: &str) -> i64 {
        let users = self.get("/api/v1/users?limit=500");
        let found = users.as_array().unwrap().iter().find(|u| u["email"] == email);
        found.unwrap_or_else(|| panic!("{email} is not an account: {users}"))["id"].as_i64().unwrap()
    }
}

type Vars = HashMap<&'static str, String>;

/// One command of the table: its arguments (`{name}` replaced by a value an earlier step saved),
/// its standard input, and what the API must show after it (which may save values for later).
struct Step {
    args: &'static str,
    stdin: Option<&'static str>,
    check: fn(&Value, &Api, &mut Vars),
}

const NEWS: &str = "/api/v1/domains/example.org/lists/news";

fn steps() -> Vec<Step> {
    let step = |args, check| Step { args, stdin: None, check };
    vec![
        Step {
            args: "user create --email bob@example.org --name Bob --password-stdin",
            stdin: Some(PASSWORD),
            check: |out, api, vars| {
                let id = api.user_id("bob@example.org");
                assert_eq!(out["id"], id);
                assert_eq!(api.get(&format!("/api/v1/users/{id}"))["has_password"], true);
                vars.insert("bob", id.to_string());
            },
        },
        step("user invite --email carol@example.org", |out, api, _| {
            let id = api.user_id("carol@example.org");
            assert_eq!(out["invitation"].as_str().map(|s| s != "not_needed"), Some(true), "{out}");
            assert_eq!(api.get(&format!("/api/v1/users/{id}"))["has_password"], false);
        }),
        step("user list", |out, api, _| {
            let listed = api.call("GET", "/api/v1/users", None).json();
            assert_eq!(out["total"], listed["meta"]["total"], "{out}");
            assert_eq!(out["items"].as_array().unwrap().len(), 3);
        }),
        step("user show --email bob@example.org", |out, api, vars| {
            assert_eq!(out["email"], "bob@example.org");
            assert_eq!(out["id"], api.get(&format!("/api/v1/users/{}", vars["bob"]))["id"]);
            assert!(out["roles"].is_array(), "{out}");
        }),
        step("user disable --email bob@example.org", |out, api, vars| {
            assert_eq!(out["status"], "disabled");
            assert_eq!(api.get(&format!("/api/v1/users/{}", vars["bob"]))["status"], "disabled");
        }),
        step("user enable --email bob@example.org", |_, api, vars| {
            assert_eq!(api.get(&format!("/api/v1/users/{}", vars["bob"]))["status"], "active");
        }),
        Step {
            args: "user password --email bob@example.org",
            stdin: Some("another passphrase, longer\n"),
            check: |_, api, _| {
                let login = |password: &str| {
                    let body = serde_json::json!({ "email": "bob@example.org", "password": password });
                    api.app.client.post_json("/api/v1/auth/login", &body).status
                };
                assert_eq!(login("another passphrase, longer"), 200, "the new password signs in");
                assert_eq!(login(PASSWORD), 401, "the old one no longer does");
            },
        },
        step("domain create example.org", |out, api, _| {
            assert_eq!(out["status"], "pending_mta");
            assert_eq!(api.get("/api/v1/domains/example.org")["name"], "example.org");
        }),
        step("domain create --domain example.net", |_, api, _| {
            assert_eq!(api.status("/api/v1/domains/example.net"), 200);
        }),
        step("domain list", |out, api, _| {
            assert_eq!(out["total"], api.call("GET", "/api/v1/domains", None).json()["meta"]["total"]);
            assert_eq!(out["items"][0]["name"], "example.net", "by name");
        }),
        step("domain show example.org", |out, api, _| {
            assert_eq!(out, &api.get("/api/v1/domains/example.org"));
        }),
        step("domain update example.org --default-subscription-policy open --status active", |_, api, _| {
            let d = api.get("/api/v1/domains/example.org");
            assert_eq!(
                (d["default_subscription_policy"].as_str(), d["status"].as_str()),
                (Some("open"), Some("active"))
            );
        }),
        step("domain dns-check example.org", |out, api, _| {
            assert!(out["records"].is_array(), "{out}");
            assert!(api.get("/api/v1/domains/example.org")["dns_checked_at"].is_string(), "the verdict is stored");
        }),
        step(
            "list create --domain example.org --list news --display-name News --owner admin@example.org",
            |out, api, _| {
                assert_eq!(out["address"], "news@example.org");
                assert_eq!(api.get(NEWS)["subscription_policy"], "open", "the domain's default");
            },
        ),
        step("list list --domain example.org", |out, api, _| {
            let listed = api.get("/api/v1/domains/example.org/lists");
            assert_eq!(out["items"], listed);
        }),
        step("list show --domain example.org --list news", |out, api, _| {
            assert_eq!(out, &api.get(NEWS));
        }),
        step("list update --domain example.org --list news --subject-tag NEWS --max-message-kb 64", |_, api, _| {
            let l = api.get(NEWS);
            assert_eq!((l["subject_tag"].as_str(), l["max_message_kb"].as_u64()), (Some("NEWS"), Some(64)));
        }),
        step("list suspend --domain example.org --list news", |_, api, _| {
            assert_eq!(api.get(NEWS)["send_suspended"], true);
        }),
        step("list resume --domain example.org --list news", |_, api, _| {
            assert_eq!(api.get(NEWS)["send_suspended"], false);
        }),
        step("role grant --email bob@example.org --role owner --domain example.org --list news", |_, api, vars| {
            let roles = api.get(&format!("/api/v1/users/{}/roles", vars["bob"]));
            assert!(roles.as_array().unwrap().iter().any(|r| r["role"] == "owner" && r["list"] == "news"), "{roles}");
        }),
        step("role list --email bob@example.org", |out, api, vars| {
            assert_eq!(out["items"], api.get(&format!("/api/v1/users/{}/roles", vars["bob"])));
        }),
        step("role revoke --email bob@example.org --role owner --domain example.org --list news", |_, api, vars| {
            let roles = api.get(&format!("/api/v1/users/{}/roles", vars["bob"]));
            assert!(roles.as_array().unwrap().is_empty(), "{roles}");
        }),
        step("create-api-key --email bob@example.org --scope user --perms read --name bobs", |out, api, vars| {
            let id = out["id"].as_i64().unwrap();
            let keys = api.get("/api/v1/apikeys");
            assert!(keys.as_array().unwrap().iter().any(|k| k["id"] == id && k["revoked_at"].is_null()), "{keys}");
            vars.insert("bobs_key", id.to_string());
        }),
        step("apikey list", |out, api, _| {
            let keys = api.get("/api/v1/apikeys");
            assert_eq!(out["items"], keys);
        }),
        step("apikey revoke {bobs_key}", |_, api, vars| {
            let keys = api.get("/api/v1/apikeys");
            let key = keys
                .as_array()
                .unwrap()
                .iter()
                .find(|k| vars["bobs_key"].parse::<i64>().ok() == k["id"].as_i64())
                .unwrap();
            assert!(key["revoked_at"].is_string(), "{key}");
        }),
        step("member add --domain example.org --list news --email ann@example.net --name Ann", |out, api, vars| {
            assert_eq!(out["status"], "active");
            let m = api.get(&format!("{NEWS}/members/ann@example.net"));
            assert_eq!((m["status"].as_str(), m["display_name"].as_str()), (Some("active"), Some("Ann")));
            vars.insert("ann", m["id"].to_string());
        }),
        step("member show --domain example.org --list news {ann}", |out, api, _| {
            assert_eq!(out, &api.get(&format!("{NEWS}/members/ann@example.net")));
        }),
        step("member list --domain example.org --list news --status active", |out, api, _| {
            assert_eq!(out["items"], api.get(&format!("{NEWS}/members?status=active")));
            assert_eq!(out["total"], 1);
        }),
        step("member remove --domain example.org --list news ann@example.net", |_, api, _| {
            assert_eq!(api.get(&format!("{NEWS}/members/ann@example.net"))["status"], "removed");
        }),
        step("members import --domain example.org --list news --consent-evidence forms {csv}", |out, api, _| {
            assert_eq!(out["added"], 2, "{out}");
            let members = api.call("GET", &format!("{NEWS}/members?status=active"), None).json();
            assert_eq!(members["meta"]["total"], 2);
        }),
        step("members export --domain example.org --list news --status active -o {export}", |out, _, vars| {
            assert_eq!(out["rows"], 2, "{out}");
            let csv = std::fs::read_to_string(&vars["export"]).unwrap();
            assert_eq!(csv.lines().count(), 3, "{csv}");
        }),
        step("send submit --domain example.org --list news --subject Hello --text-file {body}", |out, api, vars| {
            assert_eq!(out["recipients"], 1, "the one regular member: {out}");
            let id = out["send_id"].to_string();
            assert_eq!(api.get(&format!("{NEWS}/sends/{id}"))["subject"], "Hello");
            vars.insert("send", id);
        }),
        step("send status --domain example.org --list news {send}", |out, api, vars| {
            assert_eq!(out, &api.get(&format!("{NEWS}/sends/{}", vars["send"])));
        }),
        step("digests run --list news", |out, api, _| {
            // The post above waits for the one digest member: its digest is queued now.
            let built = out["items"].as_array().unwrap();
            assert_eq!(built.len(), 1, "{out}");
            assert_eq!(
                (built[0]["list"].as_str(), built[0]["recipients"].as_u64()),
                (Some("news@example.org"), Some(1))
            );
            let send = api.get(&format!("{NEWS}/sends/{}", built[0]["send_id"]));
            assert_eq!(send["recipients"], 1, "{send}");
        }),
        step("send cancel --domain example.org --list news {send}", |_, api, vars| {
            let send = api.get(&format!("{NEWS}/sends/{}", vars["send"]));
            assert_eq!(send["counts"]["cancelled"], 1, "{send}");
        }),
        step(
            "webhook create --url https://127.0.0.1:9/hook --events member.added,send.completed --domain example.org --list news",
            |out, api, vars| {
                assert!(out["secret"].as_str().unwrap().starts_with("whsec_"), "{out}");
                let hooks = api.get("/api/v1/webhooks");
                let list_id = api.get(NEWS)["id"].clone();
                assert_eq!((hooks[0]["id"].clone(), hooks[0]["list_id"].clone()), (out["id"].clone(), list_id));
                vars.insert("hook", out["id"].to_string());
            },
        ),
        step("webhook list", |out, api, _| {
            assert_eq!(out["items"], api.get("/api/v1/webhooks"));
        }),
        step("webhook test {hook}", |out, api, _| {
            // Nothing listens on port 9: the ping is sent, fails, and the failure is recorded.
            assert_eq!(out["delivered"], false, "{out}");
            assert!(api.get("/api/v1/webhooks")[0]["last_error"].is_string());
        }),
        step("webhook delete {hook}", |_, api, _| {
            assert_eq!(api.get("/api/v1/webhooks"), serde_json::json!([]));
        }),
        step("maintenance on", |out, api, _| {
            assert_eq!(out["maintenance"], true);
            assert_eq!(api.status("/api/ruok"), 503);
        }),
        step("maintenance off", |_, api, _| {
            assert_ne!(api.status("/api/ruok"), 503);
        }),
        step("ocr plan --email admin@example.org --pages-per-month 10", |_, api, _| {
            let plan = api.call("GET", "/api/subscriptions", None).json();
            assert_eq!(plan["pages_per_month"], 10, "{plan}");
        }),
        step("ocr failed", |out, _, _| {
            assert_eq!(out["total"], 0, "{out}");
        }),
        step("audit --action member.remove", |out, api, _| {
            assert_eq!(out["items"], api.get("/api/v1/audit?action=member.remove"));
            let entry = &out["items"][0];
            assert_eq!((entry["request_id"].as_str(), entry["outcome"].as_str()), (Some("cli"), Some("done")), "{out}");
            assert!(entry["actor_user_id"].is_null() && entry["actor_key_id"].is_null(), "the operator: {entry}");
        }),
    ]
}

/// Every administration command, run with `--json` by the operator against the data directory
/// of a running server, then checked through the API; read commands run a second time without
/// `--json` and print text, not JSON.
#[test]
fn every_administration_command_does_what_it_says_as_the_api_then_shows() {
    let app = ProcessApp::spawn(&[
        ("COURRIER_LOG", "warn"),
        ("COURRIER_DELIVERY_WORKERS", "0"),
        ("COURRIER_DNS_SERVER", "127.0.0.1:9"),
    ]);
    let env = [("COURRIER_DNS_SERVER", "127.0.0.1:9"), ("COURRIER_EGRESS_ALLOW", "127.0.0.0/8")];
    let (st, _, err) = run_cli_in(
        app.dir.path(),
        &["user", "create", "--email", ADMIN, "--password-stdin", "--site-admin"],
        &env,
        Some(PASSWORD),
    );
    assert!(st.success(), "{err}");
    let (st, key, err) = run_cli_in(
        app.dir.path(),
        &[
            "create-api-key",
            "--email",
            ADMIN,
            "--scope",
            "user",
            "--perms",
            "read,members:write,send,manage",
            "--name",
            "t",
        ],
        &env,
        None,
    );
    assert!(st.success(), "{err}");
    let api = Api { app: &app, key: key.trim().to_owned() };
    let files = tempfile::tempdir().unwrap();
    let path = |name: &str| files.path().join(name).display().to_string();
    std::fs::write(path("in.csv"), "email,display_name,delivery_mode\nb@example.net,B,\nc@example.net,,digest\n")
        .unwrap();
    std::fs::write(path("body.txt"), "Hello, members.\n").unwrap();
    let mut vars: Vars =
        HashMap::from([("csv", path("in.csv")), ("export", path("out.csv")), ("body", path("body.txt"))]);
    for step in steps() {
        let mut line = step.args.to_owned();
        for (name, value) in &vars {
            line = line.replace(&format!("{{{name}}}"), value);
        }
        let args: Vec<&str> = ["--json"].into_iter().chain(line.split(' ')).collect();
        let (st, out, err) = run_cli_in(app.dir.path(), &args, &env, step.stdin);
        assert!(st.success(), "courrier {line}: {err}");
        let doc: Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("courrier {line} --json: one document, not {out:?}: {e}"));
        (step.check)(&doc, &api, &mut vars);
        let reads = ["list", "show", "status"];
        if reads.iter().any(|r| line.split(' ').nth(1) == Some(*r)) || line.starts_with("audit") {
            let (st, text, err) = run_cli_in(app.dir.path(), &line.split(' ').collect::<Vec<_>>(), &env, None);
            assert!(st.success(), "courrier {line}: {err}");
            assert!(!text.trim().is_empty() && serde_json::from_str::<Value>(&text).is_err(), "{line}: text: {text}");
        }
    }
}

/// Runs `courrier ARGS` on a data directory with a list news@example.org and a member.
fn prepared() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str], stdin: Option<&str>| {
        let (st, _, err) = run_cli_in(dir.path(), args, &[], stdin);
        assert!(st.success(), "{args:?}: {err}");
    };
    run(&["user", "create", "--email", ADMIN, "--password-stdin"], Some(PASSWORD));
    run(&["domain", "create", "example.org"], None);
    run(
        &["list", "create", "--domain", "example.org", "--list", "news", "--display-name", "N", "--owner", ADMIN],
        None,
    );
    run(&["member", "add", "--domain", "example.org", "--list", "news", "--email", "ann@example.net"], None);
    dir
}

#[test]
fn an_unknown_list_exits_3_with_nothing_on_stdout() {
    let dir = prepared();
    let list = ["--domain", "example.org", "--list", "nope"];
    for command in [
        &["member", "list"][..],
        &["member", "show", "ann@example.net"][..],
        &["list", "show"][..],
        &["send", "status", "1"][..],
        &["members", "export", "-o", "/dev/null"][..],
    ] {
        let args: Vec<&str> = command.iter().chain(&list).copied().collect();
        let (st, out, err) = run_cli_in(dir.path(), &args, &[], None);
        assert_eq!(st.code(), Some(3), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains("list not found"), "{args:?}: {err}");
        let json: Vec<&str> = ["--json"].into_iter().chain(args.iter().copied()).collect();
        let (st, out, err) = run_cli_in(dir.path(), &json, &[], None);
        assert_eq!((st.code(), out.as_str()), (Some(3), ""), "{err}");
        let e: Value = serde_json::from_str(err.trim()).unwrap();
        assert_eq!(e["error"]["code"], "not_found", "{e}");
    }
    let (st, _, err) = run_cli_in(dir.path(), &["digests", "run", "--list", "nope"], &[], None);
    assert_eq!(st.code(), Some(3), "{err}");
}

#[test]
fn a_bad_value_exits_1_with_nothing_on_stdout() {
    let dir = prepared();
    let list = ["--domain", "example.org", "--list", "news"];
    for (command, says) in [
        (&["member", "add", "--email", "not-an-address"][..], "not-an-address"),
        (&["member", "add", "--email", "b@example.net", "--delivery-mode", "weekly"][..], "delivery_mode"),
        (&["member", "list", "--status", "gone"][..], "status"),
        (&["member", "list", "--limit", "0"][..], "limit"),
        (&["member", "list", "--limit", "many"][..], "limit"),
        (&["list", "update", "--max-message-kb", "big"][..], "max_message_kb"),
        (&["list", "update", "--posting-policy", "anyone"][..], "posting_policy"),
        (&["send", "status", "0"][..], "send id"),
        (&["send", "submit", "--subject", "Hi"][..], "text or html"),
    ] {
        let args: Vec<&str> = command.iter().chain(&list).copied().collect();
        let (st, out, err) = run_cli_in(dir.path(), &args, &[], None);
        assert_eq!(st.code(), Some(1), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    for args in [
        &["domain", "update", "example.org", "--status", "sleeping"][..],
        &["role", "grant", "--email", ADMIN, "--role", "king"][..],
        &["apikey", "revoke", "x"][..],
        &["audit", "--since", "yesterday"][..],
        &["webhook", "create", "--url", "https://hooks.example.net/", "--events", "member.eaten"][..],
        &["user", "password", "--email", ADMIN][..],
    ] {
        let (st, out, err) = run_cli_in(dir.path(), args, &[], None);
        assert_eq!(st.code(), Some(1), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
    // A clap-level value (a number) is a bad value too, not a usage error; with --json, the
    // error is a JSON document on stderr.
    let (st, out, err) = run_cli_in(dir.path(), &["--json", "ocr", "failed", "--limit", "lots"], &[], None);
    assert_eq!((st.code(), out.as_str()), (Some(1), ""), "{err}");
    let e: Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(e["error"]["code"], "validation_failed", "{e}");
}

#[test]
fn a_list_name_alone_names_the_list_for_digests_only_when_one_domain_has_it() {
    let dir = prepared();
    let (st, out, err) = run_cli_in(dir.path(), &["--json", "digests", "run", "--list", "news"], &[], None);
    assert!(st.success(), "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["items"], serde_json::json!([]));
    for args in [
        &["domain", "create", "example.net"][..],
        &["list", "create", "--domain", "example.net", "--list", "news", "--display-name", "N", "--owner", ADMIN][..],
    ] {
        assert!(run_cli_in(dir.path(), args, &[], None).0.success());
    }
    let (st, out, err) = run_cli_in(dir.path(), &["digests", "run", "--list", "news"], &[], None);
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(out.is_empty() && err.contains("example.net, example.org"), "{err}");
    let (st, _, err) =
        run_cli_in(dir.path(), &["digests", "run", "--domain", "example.net", "--list", "news"], &[], None);
    assert!(st.success(), "{err}");
}

#[test]
fn a_20000_row_import_with_json_prints_only_its_report() {
    let dir = prepared();
    let mut csv = String::from("email,display_name,delivery_mode\n");
    for i in 0..20_000 {
        csv.push_str(&format!("member{i}@example.net,Member {i},regular\n"));
    }
    let file = dir.path().join("big.csv");
    std::fs::write(&file, csv).unwrap();
    let args = [
        "--json",
        "members",
        "import",
        "--domain",
        "example.org",
        "--list",
        "news",
        "--consent-evidence",
        "forms",
        file.to_str().unwrap(),
    ];
    let (st, out, err) = run_cli_in(dir.path(), &args, &[], None);
    assert!(st.success(), "{err}");
    assert_eq!(out.lines().count(), 1, "one line: {}", &out[..out.len().min(500)]);
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((report["total"].as_u64(), report["added"].as_u64()), (Some(20_000), Some(20_000)), "{report}");
    assert!(err.is_empty(), "nothing else, on either stream: {err}");
}

#[test]
fn completions_and_the_man_page_generate_from_the_definitions() {
    for shell in ["bash", "zsh", "fish"] {
        let (st, out, err) = run_cli(&["completions", shell], &[]);
        assert!(st.success(), "{shell}: {err}");
        for word in ["courrier", "webhook", "dns-check", "--consent-evidence"] {
            assert!(out.contains(word), "{shell} completes {word}");
        }
    }
    let (st, out, err) = run_cli(&["completions", "powershell"], &[]);
    assert_eq!((st.code(), out.as_str()), (Some(1), ""), "{err}");
    let (st, page, err) = run_cli(&["man"], &[]);
    assert!(st.success(), "{err}");
    assert!(page.contains(".TH courrier 1") && page.contains("webhook"), "{page}");
    let (st, page, err) = run_cli(&["man", "member", "add"], &[]);
    assert!(st.success(), "{err}");
    assert!(page.contains(".TH courrier\\-member\\-add") || page.contains(".TH courrier-member-add"), "{page}");
    assert!(page.contains("consent\\-evidence"), "{page}");
    let (st, out, _) = run_cli(&["man", "nothing"], &[]);
    assert_eq!((st.code(), out.as_str()), (Some(1), ""));
    let (st, help, _) = run_cli(&["--help"], &[]);
    assert!(st.success());
    let areas: Vec<usize> = ["Server:", "Accounts and access:", "Mailing lists:", "OCR service:"]
        .iter()
        .map(|a| help.find(a).unwrap())
        .collect();
    assert!(areas.windows(2).all(|w| w[0] < w[1]), "{help}");
}
