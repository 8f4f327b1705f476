//! Bearer tokens on the network face, end to end through the real router:
//! every operation and read × every principal kind is allowed or refused
//! `forbidden` (403) as the policy says, with tokens issued through the
//! ledger itself; a request without a valid token is 401 and records
//! nothing; a revoked or expired token stops working; the isolation cases
//! of the draft hold against an agent that names another; and no token
//! appears in the data dir or in any answer.

mod common;

use agentledger::auth::tokens;
use agentledger::model::LedgerEvent;
use agentledger::model::Topic;
use agentledger::server::HttpOptions;
use common::wire::{Via, Wire};
use common::{Ledger, TestClock};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

fn ctx(agent: &str, sub: &str) -> Value {
    json!({
        "AgentID": format!("id-{agent}"), "AgentName": agent, "SubTaskID": sub, "SubTaskName": sub,
        "Dependencies": [], "ContextItems": [],
        "todoItems": [{"itemID": "i1", "description": "do it"}],
        "EvaluationPolicy": {"SuccessCriteria": [{"CriterionID": "c1", "Description": "ok", "Required": true}], "ConfidenceThreshold": 0.8}
    })
}

fn task_context() -> Value {
    json!({"TaskID":"T1","UserQuery":"q","TaskName":"n","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"})
}

/// A test server with the principals' tokens, issued through it.
struct Setup {
    l: Ledger,
    wire: Wire,
    /// Principal (as the table names it) → its token.
    tokens: BTreeMap<&'static str, String>,
}

impl Setup {
    fn op(&mut self, who: &str, v: &Value) -> (u16, Value) {
        let token = self.tokens[who].clone();
        let (status, text) = self.wire.request(
            &mut self.l.engine,
            "POST",
            "/v1/ops",
            Some(v.to_string()),
            Some(&token),
            false,
        );
        let answer = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{v}: {e}: {text}"));
        (status, answer)
    }

    fn ok(&mut self, who: &str, v: Value) -> Value {
        let (status, a) = self.op(who, &v);
        assert_eq!((status, &a["ok"]), (200, &json!(true)), "{who}: {v} → {a}");
        a
    }

    /// Issue a token for `principal` with `scopes` as the operator.
    fn issue(&mut self, principal: &str, scopes: &[&str], expires_in_s: Option<u64>) -> String {
        let token = tokens::generate().unwrap();
        let mut op = json!({"op":"issue_token","principal":principal,"scopes":scopes,
            "sha256": hex::encode(tokens::hash(&token))});
        if let Some(s) = expires_in_s {
            op["expires_in_s"] = json!(s);
        }
        let a = self.ok("operator", op);
        assert_eq!(a["id"], json!(tokens::id_of(&tokens::hash(&token))));
        assert!(!a.to_string().contains(&token));
        token
    }

    fn log_ends(&self) -> Vec<u64> {
        let log = self.l.engine.log();
        Topic::ALL
            .iter()
            .flat_map(|t| (0..log.partitions(*t)).map(move |p| (*t, p)))
            .map(|(t, p)| log.end_offset(t, p).unwrap())
            .collect()
    }
}

fn setup(dir: &Path, clock: Option<&TestClock>) -> Setup {
    setup_with(dir, clock, HttpOptions::default())
}

fn setup_with(dir: &Path, clock: Option<&TestClock>, http: HttpOptions) -> Setup {
    let opts = clock
        .map(|c| c.options())
        .unwrap_or_else(common::fixed_clock_options);
    let l = Ledger::open_with(dir, &common::Backend::Embedded, opts);
    let wire = Wire::start_with(&l.engine, Via::Http, http);
    let mut tokens = BTreeMap::new();
    tokens.insert("operator", wire.token.clone());
    let mut s = Setup { l, wire, tokens };
    for (who, principal, scopes) in [
        ("platform:acme", "platform:acme", &["acme"][..]),
        ("platform:other", "platform:other", &["other"][..]),
        ("agent:hotel", "agent:hotel", &[][..]),
        ("agent:weather", "agent:weather", &[][..]),
        ("auditor", "auditor", &[][..]),
        ("consumer", "consumer", &[][..]),
        ("consumer:other", "consumer", &["other"][..]),
    ] {
        let t = s.issue(principal, scopes, None);
        s.tokens.insert(who, t);
    }
    for agent in ["planner", "hotel", "weather"] {
        s.ok(
            "platform:acme",
            json!({"op":"publish_agent","agent":agent,"scope":"acme/travel"}),
        );
    }
    s.ok(
        "platform:acme",
        json!({"op":"open_run","run":"m1","agent":"planner"}),
    );
    s.ok(
        "platform:acme",
        json!({"op":"open_run","run":"h1","agent":"hotel"}),
    );
    s.ok(
        "platform:acme",
        json!({"op":"open_task","task":"t1","run":"m1","task_context":task_context()}),
    );
    s.ok(
        "platform:acme",
        json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":ctx("hotel","sub-hotel")}),
    );
    s
}

const PRINCIPALS: [&str; 7] = [
    "operator",
    "platform:acme",
    "platform:other",
    "agent:hotel",
    "agent:weather",
    "auditor",
    "consumer",
];

#[test]
fn every_operation_by_every_principal_is_allowed_or_forbidden_over_http() {
    let d = tempfile::tempdir().unwrap();
    let mut s = setup(d.path(), None);
    let blob = s.ok(
        "platform:acme",
        json!({"op":"put_blob","task":"t1","content":"the hotel's document"}),
    );
    let uri = blob["uri"].as_str().unwrap().to_string();
    // (operation, the principals that may make it). Operations that change
    // state come after those that need it unchanged; an allowed request
    // may still be refused for another reason (never `forbidden`).
    let table: Vec<(Value, &[&str])> = vec![
        (
            json!({"op":"publish_agent","agent":"p-{i}","scope":"acme/travel"}),
            &["operator", "platform:acme"],
        ),
        (
            json!({"op":"open_run","run":"o-{i}","agent":"hotel"}),
            &["operator", "platform:acme"],
        ),
        (
            json!({"op":"read_artifact","run":"h1","name":"x"}),
            &["operator", "agent:hotel"],
        ),
        (
            json!({"op":"dispatch"}),
            &["operator", "platform:acme", "platform:other"],
        ),
        (
            json!({"op":"open_task","task":"t-{i}","run":"m1","task_context":task_context()}),
            &["operator", "platform:acme"],
        ),
        (
            json!({"op":"update_task","task":"t1","run":"m1","task_context":task_context()}),
            &["operator", "platform:acme"],
        ),
        (
            json!({"op":"put_blob","task":"t1","content":"more"}),
            &["operator", "platform:acme"],
        ),
        (
            json!({"op":"get_context","task":"t1","agent":"hotel"}),
            &["operator", "agent:hotel"],
        ),
        (
            json!({"op":"get_blob","task":"t1","agent":"hotel","uri":uri}),
            &["operator", "agent:hotel"],
        ),
        (
            json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":ctx("w-{i}","sub-{i}")}),
            &["operator", "platform:acme"],
        ),
        (
            json!({"op":"return_context","task":"t1","agent":"hotel","agent_context":ctx("hotel","sub-hotel")}),
            &["operator", "agent:hotel"],
        ),
        (
            json!({"op":"evaluate","task":"t1","run":"m1","subtask":"sub-hotel","decision":"accepted"}),
            &["operator", "platform:acme"],
        ),
        (
            json!({"op":"close_run","run":"h1","status":"succeeded"}),
            &["operator", "platform:acme", "agent:hotel"],
        ),
        (
            json!({"op":"issue_token","principal":"auditor","sha256":"{sha}"}),
            &["operator"],
        ),
        (
            json!({"op":"revoke_token","id":"tok_000000000000"}),
            &["operator"],
        ),
    ];
    let mut answers = Vec::new();
    for (i, (op, allowed)) in table.iter().enumerate() {
        for (j, who) in PRINCIPALS.iter().enumerate() {
            let text = op
                .to_string()
                .replace("{i}", &format!("{i}-{j}"))
                .replace("{sha}", &hex::encode(tokens::hash(&format!("t{i}{j}"))));
            let v: Value = serde_json::from_str(&text).unwrap();
            let (status, a) = s.op(who, &v);
            let forbidden = a["error"]["code"] == json!("forbidden");
            assert_eq!(
                !forbidden,
                allowed.contains(who),
                "{who}: {v} → {status} {a}"
            );
            assert_eq!(forbidden, status == 403, "{who}: {v} → {status} {a}");
            if forbidden {
                let message = a["error"]["message"].as_str().unwrap();
                assert!(message.starts_with(&format!("{who} may not ")), "{a}");
            }
            answers.push(a.to_string());
        }
    }
    // The reads and the event stream.
    let reads: [(&str, &[&str]); 5] = [
        ("/v1/status", &["operator", "auditor"]),
        ("/v1/tokens", &["operator", "auditor"]),
        // A platform reads its own runs (acme's scope covers m1's agent).
        (
            "/v1/runs/m1/trail",
            &["operator", "platform:acme", "auditor"],
        ),
        ("/metrics", &["operator", "auditor"]),
        ("/v1/events?scope=acme/travel", &["operator", "consumer"]),
    ];
    for (path, allowed) in reads {
        for who in PRINCIPALS.iter().chain(&["consumer:other"]) {
            let token = s.tokens[who].clone();
            let stream = path.starts_with("/v1/events");
            let (status, body) =
                s.wire
                    .request(&mut s.l.engine, "GET", path, None, Some(&token), stream);
            let expect = if allowed.contains(who) { 200 } else { 403 };
            assert_eq!(status, expect, "{who}: GET {path} → {status} {body}");
            answers.push(body);
        }
    }
    // A consumer limited to scopes follows them, and only them.
    let token = s.tokens["consumer:other"].clone();
    let (status, _) = s.wire.request(
        &mut s.l.engine,
        "GET",
        "/v1/events?scope=other/x",
        None,
        Some(&token),
        true,
    );
    assert_eq!(status, 200);
    // The token list shows who holds what, never a token.
    let operator = s.tokens["operator"].clone();
    let (_, list) = s.wire.request(
        &mut s.l.engine,
        "GET",
        "/v1/tokens",
        None,
        Some(&operator),
        false,
    );
    assert!(list.contains("\"principal\":\"platform:acme\""), "{list}");
    assert_no_token_anywhere(&s, d.path(), &answers);
}

/// No token text in any answer, nor in any file of the data dir (log,
/// views, content store), nor in trail and export output.
fn assert_no_token_anywhere(s: &Setup, dir: &Path, answers: &[String]) {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                files.push(std::fs::read(e.path()).unwrap());
            }
        }
    }
    assert!(!files.is_empty());
    let trail: Vec<String> =
        s.l.engine
            .trail("m1", true)
            .unwrap()
            .iter()
            .map(|st| agentledger::queries::report::step_line("m1", st))
            .collect();
    for (who, token) in &s.tokens {
        if *who == "operator" {
            continue;
        }
        for a in answers {
            assert!(!a.contains(token.as_str()), "{who}'s token in {a}");
        }
        for f in &files {
            assert!(
                !f.windows(token.len()).any(|w| w == token.as_bytes()),
                "{who}'s token in the data dir"
            );
        }
        assert!(!trail.iter().any(|l| l.contains(token.as_str())));
    }
}

/// The draft's isolation cases, authenticated: an agent cannot read
/// another's context or blob by naming it, a non-master cannot send or
/// evaluate, and each refusal is a step of the master run, as its caller's.
#[test]
fn an_agent_naming_another_is_refused_and_the_refusal_is_kept_as_its() {
    let d = tempfile::tempdir().unwrap();
    let mut s = setup(d.path(), None);
    let blob = s.ok(
        "platform:acme",
        json!({"op":"put_blob","task":"t1","content":"hotel's secret plan"}),
    );
    let uri = blob["uri"].as_str().unwrap();
    let mine = s.ok(
        "agent:hotel",
        json!({"op":"get_context","task":"t1","agent":"hotel"}),
    );
    assert_eq!(mine["agent_context"]["AgentName"], "hotel");
    for v in [
        json!({"op":"get_context","task":"t1","agent":"hotel"}),
        json!({"op":"get_blob","task":"t1","agent":"hotel","uri":uri}),
        json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":ctx("weather","w1")}),
        json!({"op":"evaluate","task":"t1","run":"m1","subtask":"sub-hotel","decision":"accepted"}),
    ] {
        let (status, a) = s.op("agent:weather", &v);
        assert_eq!(status, 403, "{v} → {a}");
        assert!(!a.to_string().contains("secret plan"));
    }
    let forbidden: Vec<(String, String)> =
        s.l.engine
            .trail("m1", false)
            .unwrap()
            .into_iter()
            .filter_map(|st| match st.event {
                LedgerEvent::Forbidden(f) => Some((f.op, st.principal)),
                _ => None,
            })
            .collect();
    assert_eq!(
        forbidden,
        ["get_context", "get_blob", "send_context", "evaluate"]
            .map(|op| (op.to_string(), "agent:weather".to_string()))
    );
}

#[test]
fn without_a_valid_token_a_request_is_401_and_records_nothing() {
    let d = tempfile::tempdir().unwrap();
    let clock = TestClock::at(1_700_000_000_000);
    let mut s = setup(d.path(), Some(&clock));
    let revoked = s.issue("platform:acme", &["acme"], None);
    let id = tokens::id_of(&tokens::hash(&revoked));
    let a = s.ok("operator", json!({"op":"revoke_token","id":id}));
    assert_eq!(a["revoked"], json!(true));
    let (status, again) = s.op("operator", &json!({"op":"revoke_token","id":id}));
    assert_eq!(
        (status, again["error"]["code"].as_str()),
        (409, Some("conflict"))
    );
    let expiring = s.issue("platform:acme", &["acme"], Some(60));
    let open = json!({"op":"open_run","run":"late","agent":"hotel"}).to_string();
    // The expiring token works until its time.
    let (status, _) = s.wire.request(
        &mut s.l.engine,
        "POST",
        "/v1/ops",
        Some(json!({"op":"open_run","run":"early","agent":"hotel"}).to_string()),
        Some(&expiring),
        false,
    );
    assert_eq!(status, 200);
    clock.advance(60_000);
    let before = s.log_ends();
    let made_up = tokens::generate().unwrap();
    for (bearer, why) in [
        (None, "no credential"),
        (Some("not-a-token"), "not one this ledger issued"),
        (Some(made_up.as_str()), "not one this ledger issued"),
        (Some(revoked.as_str()), "was revoked"),
        (Some(expiring.as_str()), "expired at"),
    ] {
        for (method, path, body) in [
            ("POST", "/v1/ops", Some(open.clone())),
            ("GET", "/v1/runs/m1/trail", None),
            ("GET", "/v1/status", None),
            ("GET", "/v1/verify", None),
        ] {
            let (status, text) = s
                .wire
                .request(&mut s.l.engine, method, path, body, bearer, false);
            assert_eq!(status, 401, "{bearer:?} {path}: {text}");
            let a: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(a["error"]["code"], "unauthenticated");
            let message = a["error"]["message"].as_str().unwrap();
            assert!(message.contains(why), "{message}");
            if let Some(b) = bearer {
                assert!(!message.contains(b), "{message}");
            }
        }
    }
    // A WebSocket without a token is not upgraded.
    let (status, _) = s
        .wire
        .request(&mut s.l.engine, "GET", "/v1/ws", None, None, false);
    assert_eq!(status, 401);
    assert_eq!(s.log_ends(), before, "a 401 recorded something");
    assert!(s.l.engine.views().run("late").unwrap().is_none());
}

/// A platform's agents are published with what it was granted as their
/// access, whatever they declare within it; beyond it is forbidden.
#[test]
fn a_platforms_access_is_its_grant() {
    let d = tempfile::tempdir().unwrap();
    let mut s = setup(d.path(), None);
    s.ok(
        "platform:acme",
        json!({"op":"publish_agent","agent":"narrow","scope":"acme/travel","access":["acme/travel"]}),
    );
    let v =
        s.l.engine
            .views()
            .current_version("narrow")
            .unwrap()
            .unwrap();
    assert_eq!(v.access, ["acme"]);
    let (status, a) = s.op(
        "platform:acme",
        &json!({"op":"publish_agent","agent":"wide","scope":"acme/travel","access":["globex"]}),
    );
    assert_eq!(status, 403, "{a}");
    // The operator still declares what it likes.
    s.ok(
        "operator",
        json!({"op":"publish_agent","agent":"ops","scope":"acme/travel","access":["globex","acme"]}),
    );
    let v = s.l.engine.views().current_version("ops").unwrap().unwrap();
    assert_eq!(v.access, ["globex", "acme"]);
}

/// A key of the identity provider: what signs tokens, and its JWK.
struct ProviderKey {
    kid: &'static str,
    alg: jsonwebtoken::Algorithm,
    signing: jsonwebtoken::EncodingKey,
    jwk: Value,
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn ed25519_key(kid: &'static str) -> ProviderKey {
    let k = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    ProviderKey {
        kid,
        alg: jsonwebtoken::Algorithm::EdDSA,
        signing: jsonwebtoken::EncodingKey::from_ed_pem(k.serialize_pem().as_bytes()).unwrap(),
        jwk: json!({"kty":"OKP","crv":"Ed25519","kid":kid,"x":b64(k.public_key_raw())}),
    }
}

fn p256_key(kid: &'static str) -> ProviderKey {
    let k = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let raw = k.public_key_raw();
    ProviderKey {
        kid,
        alg: jsonwebtoken::Algorithm::ES256,
        signing: jsonwebtoken::EncodingKey::from_ec_pem(k.serialize_pem().as_bytes()).unwrap(),
        jwk: json!({"kty":"EC","crv":"P-256","kid":kid,"x":b64(&raw[1..33]),"y":b64(&raw[33..])}),
    }
}

/// A throwaway RSA key made for these tests (`tests/fixtures`): ring
/// signs RS256 but cannot make RSA keys.
fn rsa_key() -> ProviderKey {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let pem = std::fs::read(format!("{dir}/jwt-rs256-test-key.pem")).unwrap();
    let jwk: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/jwt-rs256-test-jwk.json")).unwrap(),
    )
    .unwrap();
    ProviderKey {
        kid: "rsa-test",
        alg: jsonwebtoken::Algorithm::RS256,
        signing: jsonwebtoken::EncodingKey::from_rsa_pem(&pem).unwrap(),
        jwk,
    }
}

fn jwt(key: &ProviderKey, claims: &Value) -> String {
    let header = jsonwebtoken::Header {
        kid: Some(key.kid.to_string()),
        ..jsonwebtoken::Header::new(key.alg)
    };
    jsonwebtoken::encode(&header, claims, &key.signing).unwrap()
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// JWTs from an identity provider, signed with EdDSA, ES256 or RS256:
/// the principal comes from `sub` (scopes from `scope`), the policy holds
/// as for the ledger's own tokens, and a token that is expired, not yet
/// valid, for another issuer or audience, signed by a key not in the set
/// or with another algorithm is 401 naming why, never the token.
#[test]
fn jwts_from_an_identity_provider_authenticate_by_their_claim() {
    let keys = [ed25519_key("ed"), p256_key("ec"), rsa_key()];
    let jwks = json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
    let config = agentledger::auth::jwt::JwtConfig::from_jwks(
        &jwks.to_string(),
        "https://idp.example",
        "agentledger",
        "sub",
    )
    .unwrap();
    let d = tempfile::tempdir().unwrap();
    let http = HttpOptions {
        jwt: Some(std::sync::Arc::new(config)),
        ..HttpOptions::default()
    };
    let mut s = setup_with(d.path(), None, http);
    let now = unix_now();
    let claims = |sub: &str| {
        json!({"sub": sub, "iss": "https://idp.example", "aud": "agentledger",
               "exp": now + 600, "nbf": now - 10, "iat": now})
    };
    let mut presented = Vec::new();
    let mut send = |s: &mut Setup, token: &str, v: &Value| {
        presented.push(token.to_string());
        let (status, text) = s.wire.request(
            &mut s.l.engine,
            "POST",
            "/v1/ops",
            Some(v.to_string()),
            Some(token),
            false,
        );
        let a: Value = serde_json::from_str(&text).unwrap();
        (status, a)
    };
    let get = json!({"op":"get_context","task":"t1","agent":"hotel"});
    for key in &keys {
        let (status, a) = send(&mut s, &jwt(key, &claims("agent:hotel")), &get);
        assert_eq!(status, 200, "{:?}: {a}", key.alg);
        assert_eq!(a["agent_context"]["AgentName"], "hotel");
        let (status, a) = send(&mut s, &jwt(key, &claims("agent:weather")), &get);
        assert_eq!(status, 403, "{:?}: {a}", key.alg);
    }
    // A platform's scopes come from the `scope` claim.
    let mut platform = claims("platform:acme");
    platform["scope"] = json!("acme openid");
    let (status, a) = send(
        &mut s,
        &jwt(&keys[0], &platform),
        &json!({"op":"open_run","run":"by-jwt","agent":"hotel"}),
    );
    assert_eq!(status, 200, "{a}");
    let opened_by = s.l.engine.views().run("by-jwt").unwrap().unwrap().opened_by;
    assert_eq!(opened_by, "platform:acme");
    // What is refused, and why.
    let mut expired = claims("agent:hotel");
    expired["exp"] = json!(now - 120);
    let mut early = claims("agent:hotel");
    early["nbf"] = json!(now + 600);
    let mut issuer = claims("agent:hotel");
    issuer["iss"] = json!("https://evil.example");
    let mut audience = claims("agent:hotel");
    audience["aud"] = json!("someone-else");
    let mut nameless = claims("agent:hotel");
    nameless.as_object_mut().unwrap().remove("sub");
    let stranger = ed25519_key("ed");
    let hmac = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims("operator"),
        &jsonwebtoken::EncodingKey::from_secret(b"guessable"),
    )
    .unwrap();
    // A header marking an extension critical, signed properly.
    let crit = {
        let header = json!({"alg":"EdDSA","kid":"ed","typ":"JWT","crit":["x-ext"],"x-ext":1});
        let signing_input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims("agent:hotel").to_string().as_bytes())
        );
        let sig = jsonwebtoken::crypto::sign(
            signing_input.as_bytes(),
            &keys[0].signing,
            jsonwebtoken::Algorithm::EdDSA,
        )
        .unwrap();
        format!("{signing_input}.{sig}")
    };
    let mut huge_exp = claims("agent:hotel");
    huge_exp["exp"] = json!(1e300);
    let before = s.log_ends();
    for (token, why) in [
        (crit, "critical"),
        (jwt(&keys[0], &huge_exp), "its exp is not a NumericDate"),
        (jwt(&keys[1], &expired), "it has expired"),
        (jwt(&keys[2], &early), "not valid yet"),
        (jwt(&keys[0], &issuer), "issuer"),
        (jwt(&keys[0], &audience), "audience"),
        (jwt(&keys[0], &nameless), "no string claim \"sub\""),
        (
            jwt(&stranger, &claims("operator")),
            "signature does not verify",
        ),
        (hmac, "accepted are EdDSA, ES256 and RS256"),
        ("e30.e30.e30".to_string(), "not accepted"),
    ] {
        let (status, a) = send(&mut s, &token, &get);
        assert_eq!(status, 401, "{why}: {a}");
        let message = a["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{why}: {message}");
        assert!(!message.contains(&token));
    }
    assert_eq!(s.log_ends(), before, "a 401 recorded something");
    // No presented token is kept anywhere.
    for token in &presented {
        s.tokens.insert("jwt", token.clone());
        assert_no_token_anywhere(&s, d.path(), &[]);
    }
}
