//! The Iceberg REST catalog (`/iceberg/v1/…`) in process, over a memory
//! store: the spec's answers and error models for every route, two
//! gateways on one bucket racing commits (exactly one wins each version; a
//! commit whose requirements still hold on the winner's table lands on top),
//! and tenants who see only their own namespaces.

mod support;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use sluice_server::{AppState, ServerConfig};
use sluice_testkit::MemoryStore;
use support::oneshot::{send, Answer};

async fn call(state: &AppState, method: &str, path: &str, body: Option<Value>) -> Answer {
    call_as(state, None, method, path, body).await
}

async fn call_as(
    state: &AppState,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Answer {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("/iceberg/v1/{path}"));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let body = match body {
        Some(body) => {
            request = request.header("content-type", "application/json");
            Body::from(body.to_string())
        }
        None => Body::empty(),
    };
    send(state, request.body(body).unwrap()).await
}

fn gateway(store: &MemoryStore) -> AppState {
    AppState::new(ServerConfig::default(), Arc::new(store.clone())).unwrap()
}

fn schema() -> Value {
    json!({"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "required": true, "type": "long"},
        {"id": 2, "name": "data", "required": false, "type": "string"}]})
}

/// A snapshot update appending after `parent` (its manifest list is not
/// read by the catalog).
fn snapshot(id: i64, parent: Option<i64>, sequence: i64) -> Vec<Value> {
    vec![
        json!({"action": "add-snapshot", "snapshot": {"snapshot-id": id,
            "parent-snapshot-id": parent, "sequence-number": sequence,
            "timestamp-ms": 1_700_000_000_000i64 + sequence,
            "manifest-list": format!("memory://bucket/ns/t/metadata/snap-{id}.avro"),
            "summary": {"operation": "append"}, "schema-id": 0}}),
        json!({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
            "snapshot-id": id}),
    ]
}

/// (case, method, path, body, status, error type or "")
type Case = (
    &'static str,
    &'static str,
    &'static str,
    Option<Value>,
    StatusCode,
    &'static str,
);

#[tokio::test]
async fn every_route_answers_as_the_spec_says() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let cases: Vec<Case> = vec![
        ("config", "GET", "config", None, StatusCode::OK, ""),
        (
            "create ns",
            "POST",
            "namespaces",
            Some(json!({"namespace": ["ns"], "properties": {"owner": "a"}})),
            StatusCode::OK,
            "",
        ),
        (
            "create it again",
            "POST",
            "namespaces",
            Some(json!({"namespace": ["ns"]})),
            StatusCode::CONFLICT,
            "AlreadyExistsException",
        ),
        (
            "nested ns",
            "POST",
            "namespaces",
            Some(json!({"namespace": ["ns", "inner"]})),
            StatusCode::OK,
            "",
        ),
        (
            "malformed",
            "POST",
            "namespaces",
            Some(json!({"name": "x"})),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        (
            "empty ns",
            "POST",
            "namespaces",
            Some(json!({"namespace": []})),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        ("load ns", "GET", "namespaces/ns", None, StatusCode::OK, ""),
        (
            "ns exists",
            "HEAD",
            "namespaces/ns",
            None,
            StatusCode::NO_CONTENT,
            "",
        ),
        (
            "no such ns",
            "GET",
            "namespaces/nope",
            None,
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
        ),
        (
            "properties",
            "POST",
            "namespaces/ns/properties",
            Some(json!({"removals": ["owner", "gone"], "updates": {"k": "v"}})),
            StatusCode::OK,
            "",
        ),
        (
            "both ways",
            "POST",
            "namespaces/ns/properties",
            Some(json!({"removals": ["k"], "updates": {"k": "w"}})),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        (
            "create table",
            "POST",
            "namespaces/ns/tables",
            Some(json!({"name": "t", "schema": schema()})),
            StatusCode::OK,
            "",
        ),
        (
            "create it again",
            "POST",
            "namespaces/ns/tables",
            Some(json!({"name": "t", "schema": schema()})),
            StatusCode::CONFLICT,
            "AlreadyExistsException",
        ),
        (
            "table in no ns",
            "POST",
            "namespaces/nope/tables",
            Some(json!({"name": "t", "schema": schema()})),
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
        ),
        (
            "staged create",
            "POST",
            "namespaces/ns/tables",
            Some(json!({"name": "staged", "schema": schema(), "stage-create": true})),
            StatusCode::OK,
            "",
        ),
        (
            "staged is not a table yet",
            "GET",
            "namespaces/ns/tables/staged",
            None,
            StatusCode::NOT_FOUND,
            "NoSuchTableException",
        ),
        (
            "load table",
            "GET",
            "namespaces/ns/tables/t",
            None,
            StatusCode::OK,
            "",
        ),
        (
            "table exists",
            "HEAD",
            "namespaces/ns/tables/t",
            None,
            StatusCode::NO_CONTENT,
            "",
        ),
        (
            "no such table",
            "GET",
            "namespaces/ns/tables/nope",
            None,
            StatusCode::NOT_FOUND,
            "NoSuchTableException",
        ),
        (
            "list tables",
            "GET",
            "namespaces/ns/tables",
            None,
            StatusCode::OK,
            "",
        ),
        (
            "commit",
            "POST",
            "namespaces/ns/tables/t",
            Some(
                json!({"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": null}], "updates": snapshot(11, None, 1)}),
            ),
            StatusCode::OK,
            "",
        ),
        (
            "stale commit",
            "POST",
            "namespaces/ns/tables/t",
            Some(
                json!({"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": null}], "updates": snapshot(12, None, 2)}),
            ),
            StatusCode::CONFLICT,
            "CommitFailedException",
        ),
        (
            "unknown update",
            "POST",
            "namespaces/ns/tables/t",
            Some(json!({"requirements": [], "updates": [{"action": "enable-row-lineage"}]})),
            StatusCode::BAD_REQUEST,
            "BadRequestException",
        ),
        (
            "commit to no table",
            "POST",
            "namespaces/ns/tables/nope",
            Some(json!({"requirements": [], "updates": []})),
            StatusCode::NOT_FOUND,
            "NoSuchTableException",
        ),
        (
            "drop non-empty ns",
            "DELETE",
            "namespaces/ns",
            None,
            StatusCode::CONFLICT,
            "NamespaceNotEmptyException",
        ),
        (
            "rename",
            "POST",
            "tables/rename",
            Some(
                json!({"source": {"namespace": ["ns"], "name": "t"}, "destination": {"namespace": ["ns"], "name": "u"}}),
            ),
            StatusCode::NO_CONTENT,
            "",
        ),
        (
            "old name gone",
            "GET",
            "namespaces/ns/tables/t",
            None,
            StatusCode::NOT_FOUND,
            "NoSuchTableException",
        ),
        (
            "new name",
            "GET",
            "namespaces/ns/tables/u",
            None,
            StatusCode::OK,
            "",
        ),
        (
            "two-table transaction",
            "POST",
            "transactions/commit",
            Some(json!({"table-changes": [
            {"identifier": {"namespace": ["ns"], "name": "u"}, "requirements": [], "updates": []},
            {"identifier": {"namespace": ["ns"], "name": "v"}, "requirements": [], "updates": []}]})),
            StatusCode::NOT_ACCEPTABLE,
            "UnsupportedOperationException",
        ),
        (
            "one-table transaction",
            "POST",
            "transactions/commit",
            Some(json!({"table-changes": [
            {"identifier": {"namespace": ["ns"], "name": "u"}, "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 11}], "updates": snapshot(13, Some(11), 2)}]})),
            StatusCode::NO_CONTENT,
            "",
        ),
        (
            "metrics",
            "POST",
            "namespaces/ns/tables/u/metrics",
            Some(json!({"report-type": "scan-report"})),
            StatusCode::NO_CONTENT,
            "",
        ),
        (
            "purge",
            "DELETE",
            "namespaces/ns/tables/u?purgeRequested=true",
            None,
            StatusCode::NO_CONTENT,
            "",
        ),
        (
            "drop it again",
            "DELETE",
            "namespaces/ns/tables/u",
            None,
            StatusCode::NOT_FOUND,
            "NoSuchTableException",
        ),
        (
            "drop inner ns",
            "DELETE",
            "namespaces/ns%1Finner",
            None,
            StatusCode::NO_CONTENT,
            "",
        ),
        (
            "drop empty ns",
            "DELETE",
            "namespaces/ns",
            None,
            StatusCode::NO_CONTENT,
            "",
        ),
        (
            "dropped",
            "HEAD",
            "namespaces/ns",
            None,
            StatusCode::NOT_FOUND,
            "",
        ),
    ];
    for (case, method, path, body, status, kind) in cases {
        let answer = call(&state, method, path, body).await;
        assert_eq!(answer.status, status, "{case}: {:?}", answer.json());
        if !kind.is_empty() {
            let error = &answer.json()["error"];
            assert_eq!(error["type"], kind, "{case}: {error}");
            assert_eq!(error["code"], status.as_u16(), "{case}");
        }
        match case {
            "properties" => assert_eq!(
                answer.json(),
                json!({"updated": ["k"], "removed": ["owner"], "missing": ["gone"]})
            ),
            "list tables" => assert_eq!(
                answer.json()["identifiers"],
                json!([{"namespace": ["ns"], "name": "t"}])
            ),
            "load table" => {
                let loaded = answer.json();
                assert!(loaded["metadata-location"]
                    .as_str()
                    .unwrap()
                    .ends_with("/ns/t/metadata/v1.metadata.json"));
                assert_eq!(loaded["metadata"]["format-version"], 2);
                assert_eq!(loaded["metadata"]["current-schema-id"], 0);
            }
            "staged create" => assert!(answer.json()["metadata-location"].is_null()),
            _ => {}
        }
    }
    // The purge left nothing of the table; the catalog's own objects only.
    let keys: Vec<String> = store.keys_under("");
    assert!(keys.iter().all(|k| k.starts_with("_sluice/")), "{keys:?}");
}

/// Two gateways on one bucket (the catalog's state is all in it): commits
/// racing with the same `assert-ref-snapshot-id` have exactly one winner
/// every round; the loser is told 409 and nothing of it is in the table.
#[tokio::test]
async fn two_gateways_racing_commits_have_exactly_one_winner_each_round() {
    let store = MemoryStore::new();
    let gateways = [gateway(&store), gateway(&store)];
    call(
        &gateways[0],
        "POST",
        "namespaces",
        Some(json!({"namespace": ["ns"]})),
    )
    .await;
    let created = call(
        &gateways[1],
        "POST",
        "namespaces/ns/tables",
        Some(json!({"name": "t", "schema": schema()})),
    )
    .await;
    assert_eq!(created.status, StatusCode::OK);
    let mut parent: Option<i64> = None;
    let mut winners = Vec::new();
    for round in 0..24i64 {
        let commit = |gateway: usize| {
            let id = 1000 * round + gateway as i64 + 1;
            let body = json!({
                "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main",
                    "snapshot-id": parent}],
                "updates": snapshot(id, parent, round + 1),
            });
            let state = gateways[gateway].clone();
            async move {
                (
                    id,
                    call(&state, "POST", "namespaces/ns/tables/t", Some(body)).await,
                )
            }
        };
        let ((a, first), (b, second)) = tokio::join!(commit(0), commit(1));
        let won = match (first.status, second.status) {
            (StatusCode::OK, StatusCode::CONFLICT) => a,
            (StatusCode::CONFLICT, StatusCode::OK) => b,
            other => panic!("round {round}: not exactly one winner: {other:?}"),
        };
        winners.push(won);
        parent = Some(won);
    }
    let loaded = call(&gateways[0], "GET", "namespaces/ns/tables/t", None).await;
    let metadata = &loaded.json()["metadata"];
    let snapshots: Vec<i64> = metadata["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["snapshot-id"].as_i64().unwrap())
        .collect();
    assert_eq!(snapshots, winners, "only the winners' snapshots are in");
    assert_eq!(metadata["current-snapshot-id"], *winners.last().unwrap());
    // Commits whose requirements do not conflict both land (the loser of a
    // version makes its change again on the winner's table).
    let property = |gateway: usize| {
        let state = gateways[gateway].clone();
        async move {
            call(
                &state,
                "POST",
                "namespaces/ns/tables/t",
                Some(json!({"requirements": [{"type": "assert-table-uuid",
                    "uuid": metadata_uuid(&state).await}],
                    "updates": [{"action": "set-properties",
                        "updates": {format!("writer-{gateway}"): "yes"}}]})),
            )
            .await
        }
    };
    let (first, second) = tokio::join!(property(0), property(1));
    assert_eq!(
        (first.status, second.status),
        (StatusCode::OK, StatusCode::OK)
    );
    let loaded = call(&gateways[1], "GET", "namespaces/ns/tables/t", None).await;
    let properties = &loaded.json()["metadata"]["properties"];
    assert_eq!(properties["writer-0"], "yes");
    assert_eq!(properties["writer-1"], "yes");
}

async fn metadata_uuid(state: &AppState) -> String {
    let loaded = call(state, "GET", "namespaces/ns/tables/t", None).await;
    loaded.json()["metadata"]["table-uuid"]
        .as_str()
        .unwrap()
        .to_owned()
}

const SECRET: &[u8] = b"a test secret of at least thirty-two bytes";

fn token(tenant: &str, ops: &[&str]) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"sub": tenant, "exp": exp, "ops": ops}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET),
    )
    .unwrap()
}

/// With `[auth]`, each tenant's catalog is its own: its namespaces, tables
/// and data under its key prefix; no token, no catalog; a read-only token
/// changes nothing.
#[tokio::test]
async fn tenants_see_only_their_own_catalog() {
    let store = MemoryStore::new();
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let mut config = ServerConfig::default();
    config.auth.jwt_secret_file = Some(secret);
    let state = AppState::new(config, Arc::new(store.clone())).unwrap();
    let all = ["put", "get", "list", "delete"];
    let (acme, globex) = (token("acme", &all), token("globex", &all));
    let reader = token("acme", &["get", "list"]);
    for (who, ns) in [(&acme, "sales"), (&globex, "ops")] {
        let made = call_as(
            &state,
            Some(who),
            "POST",
            "namespaces",
            Some(json!({"namespace": [ns]})),
        )
        .await;
        assert_eq!(made.status, StatusCode::OK);
        let table = call_as(
            &state,
            Some(who),
            "POST",
            &format!("namespaces/{ns}/tables"),
            Some(json!({"name": "t", "schema": schema()})),
        )
        .await;
        assert_eq!(table.status, StatusCode::OK);
    }
    let listed = call_as(&state, Some(&acme), "GET", "namespaces", None).await;
    assert_eq!(listed.json()["namespaces"], json!([["sales"]]));
    let theirs = call_as(&state, Some(&acme), "GET", "namespaces/ops/tables/t", None).await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND);
    let location = call_as(
        &state,
        Some(&acme),
        "GET",
        "namespaces/sales/tables/t",
        None,
    )
    .await
    .json()["metadata"]["location"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(location.ends_with("/acme/sales/t"), "{location}");
    // globex may not put a table where acme's are, nor in sluice's state.
    for (case, elsewhere) in [
        ("acme's table", location.clone()),
        (
            "sluice's own state",
            location.replace("/acme/sales/t", "/_sluice/x"),
        ),
    ] {
        let refused = call_as(
            &state,
            Some(&globex),
            "POST",
            "namespaces/ops/tables",
            Some(json!({"name": "squat", "schema": schema(), "location": elsewhere})),
        )
        .await;
        assert_eq!(
            refused.status,
            StatusCode::BAD_REQUEST,
            "{case}: {:?}",
            refused.json()
        );
    }
    let dots = call_as(
        &state,
        Some(&acme),
        "GET",
        "namespaces/sales/tables/..",
        None,
    )
    .await;
    assert_eq!(dots.status, StatusCode::BAD_REQUEST);
    let anonymous = call(&state, "GET", "namespaces", None).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let refused = call_as(
        &state,
        Some(&reader),
        "DELETE",
        "namespaces/sales/tables/t",
        None,
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.json()["error"]["type"], "ForbiddenException");
    let still = call_as(
        &state,
        Some(&reader),
        "HEAD",
        "namespaces/sales/tables/t",
        None,
    )
    .await;
    assert_eq!(still.status, StatusCode::NO_CONTENT);
}

/// A table dropped without its files leaves its location free: a new table
/// made there starts after the dropped one's versions and holds nothing of
/// it; a location another table of the catalog lives at is refused.
#[tokio::test]
async fn a_dropped_table_s_location_takes_a_new_table_and_a_live_one_does_not() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    call(
        &state,
        "POST",
        "namespaces",
        Some(json!({"namespace": ["ns"]})),
    )
    .await;
    let create = |name: &str, location: Option<&str>| {
        let mut body = json!({"name": name, "schema": schema()});
        if let Some(location) = location {
            body["location"] = json!(location);
        }
        body
    };
    let first = call(
        &state,
        "POST",
        "namespaces/ns/tables",
        Some(create("t", None)),
    )
    .await;
    let location = first.json()["metadata"]["location"]
        .as_str()
        .unwrap()
        .to_owned();
    let committed = call(
        &state,
        "POST",
        "namespaces/ns/tables/t",
        Some(json!({"requirements": [], "updates": snapshot(5, None, 1)})),
    )
    .await;
    assert_eq!(committed.status, StatusCode::OK);
    // Another table may not move in while t lives there.
    let squatter = call(
        &state,
        "POST",
        "namespaces/ns/tables",
        Some(create("u", Some(&location))),
    )
    .await;
    assert_eq!(
        squatter.status,
        StatusCode::CONFLICT,
        "{:?}",
        squatter.json()
    );
    assert_eq!(squatter.json()["error"]["type"], "AlreadyExistsException");
    // Dropped without purge, its files stay; a new t is made there.
    let dropped = call(&state, "DELETE", "namespaces/ns/tables/t", None).await;
    assert_eq!(dropped.status, StatusCode::NO_CONTENT);
    let again = call(
        &state,
        "POST",
        "namespaces/ns/tables",
        Some(create("t", Some(&location))),
    )
    .await;
    assert_eq!(again.status, StatusCode::OK, "{:?}", again.json());
    let loaded = call(&state, "GET", "namespaces/ns/tables/t", None)
        .await
        .json();
    assert!(
        loaded["metadata-location"]
            .as_str()
            .unwrap()
            .ends_with("/metadata/v3.metadata.json"),
        "after the dropped table's two versions: {}",
        loaded["metadata-location"]
    );
    assert_ne!(
        loaded["metadata"]["table-uuid"],
        first.json()["metadata"]["table-uuid"]
    );
    assert_eq!(loaded["metadata"]["snapshots"], json!([]));
    // Renamed, it keeps its location; the old name is free for a new table.
    let renamed = call(
        &state,
        "POST",
        "tables/rename",
        Some(json!({"source": {"namespace": ["ns"], "name": "t"},
            "destination": {"namespace": ["ns"], "name": "v"}})),
    )
    .await;
    assert_eq!(renamed.status, StatusCode::NO_CONTENT);
    let fresh = call(
        &state,
        "POST",
        "namespaces/ns/tables",
        Some(create("t", None)),
    )
    .await;
    assert_eq!(fresh.status, StatusCode::OK);
    let fresh_location = fresh.json()["metadata"]["location"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(fresh_location, location, "v lives at t's old location");
    let v = call(&state, "GET", "namespaces/ns/tables/v", None)
        .await
        .json();
    assert_eq!(v["metadata"]["location"], json!(location));
}

/// Registering a table by one of its location's older metadata files keeps
/// its history as it is (review finding: it was written again as the newest
/// version, rolling the table back); another writer's file over a history is
/// refused.
#[tokio::test]
async fn registering_an_older_version_rolls_nothing_back() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    call(
        &state,
        "POST",
        "namespaces",
        Some(json!({"namespace": ["ns"]})),
    )
    .await;
    let made = call(
        &state,
        "POST",
        "namespaces/ns/tables",
        Some(json!({"name": "t", "schema": schema()})),
    )
    .await;
    let first = made.json()["metadata-location"]
        .as_str()
        .unwrap()
        .to_owned();
    let committed = call(
        &state,
        "POST",
        "namespaces/ns/tables/t",
        Some(json!({"requirements": [], "updates": snapshot(9, None, 1)})),
    )
    .await;
    assert_eq!(committed.status, StatusCode::OK);
    call(&state, "DELETE", "namespaces/ns/tables/t", None).await;
    let registered = call(
        &state,
        "POST",
        "namespaces/ns/register",
        Some(json!({"name": "again", "metadata-location": first})),
    )
    .await;
    assert_eq!(registered.status, StatusCode::OK, "{:?}", registered.json());
    let loaded = call(&state, "GET", "namespaces/ns/tables/again", None)
        .await
        .json();
    assert_eq!(loaded["metadata"]["current-snapshot-id"], 9, "{loaded}");
    assert!(loaded["metadata-location"]
        .as_str()
        .unwrap()
        .ends_with("/v2.metadata.json"));
    // A file of the same table under another name: not one of its versions.
    let foreign = first.replace("v1.metadata.json", "00001-copy.metadata.json");
    let bytes = store
        .keys_under("")
        .into_iter()
        .find(|k| k.ends_with("ns/t/metadata/v1.metadata.json"))
        .unwrap();
    let body = sluice_store::ObjectStore::get_object(&store, &bytes, None)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    sluice_store::ObjectStore::put_object(
        &store,
        sluice_store::PutRequest::new(
            bytes.replace("v1.metadata.json", "00001-copy.metadata.json"),
            body,
        ),
    )
    .await
    .unwrap();
    let refused = call(
        &state,
        "POST",
        "namespaces/ns/register",
        Some(json!({"name": "copy", "metadata-location": foreign})),
    )
    .await;
    assert_eq!(
        refused.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        refused.json()
    );
}
