//! Direct-to-bucket uploads through the built `sluice serve --direct`, with
//! the gateway killed: a form POST the gateway was confirming when it died is
//! announced within seconds of a gateway starting again with the default
//! settings (issue 50), whichever of its store writes was its last.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice_store::ObjectStore;

mod common;

const SECRET: &[u8] = b"a test secret of at least thirty-two bytes";

fn token(tenant: &str) -> String {
    common::hs256_token(SECRET, json!({ "sub": tenant }))
}

/// Sends `bytes` to the bucket with the form `signed` describes, as Uppy does.
async fn post_form(signed: &Value, bytes: Vec<u8>) -> u16 {
    let mut form = reqwest::multipart::Form::new();
    for (name, value) in signed["fields"].as_object().unwrap() {
        form = form.text(name.clone(), value.as_str().unwrap().to_string());
    }
    form = form.part(
        "file",
        reqwest::multipart::Part::bytes(bytes).file_name("f"),
    );
    reqwest::Client::new()
        .post(signed["url"].as_str().unwrap())
        .multipart(form)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// The outbox's entries (one per event and receiver).
async fn outbox(store: &dyn ObjectStore) -> usize {
    store
        .list_objects("_sluice/events/pending/", None, 100)
        .await
        .unwrap()
        .objects
        .len()
}

/// A gateway dies right after each of its store writes in turn, while it signs
/// a form POST and confirms the object: the recording of the signature, the
/// claim, the event, the record of what it announced. A gateway started again
/// on the same bucket with the default settings has the upload's one event in
/// the outbox within 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_post_is_announced_within_seconds_of_a_gateway_killed_while_confirming_it() {
    let Some((endpoint, prefix, store)) = common::minio_prefix("direct-killed").await else {
        return;
    };
    let (_secrets, secret) = common::secret_file(SECRET);
    let args = [
        "--direct",
        "--jwt-secret-file",
        &secret,
        // Nothing listens there: events stay in the outbox, to be counted.
        "--event-url",
        "http://127.0.0.1:9/events",
        "--event-secret-file",
        &secret,
    ];
    let acme = token("acme");
    let client = reqwest::Client::new();
    let mut kills = 0;
    // Bounded: once its event is in the outbox, the gateway goes on writing
    // (each failed delivery attempt is a write).
    for writes in 1..=6 {
        let run_prefix = format!("{prefix}run-{writes}/");
        let run_store = {
            let mut config = sluice_store::s3::S3Config::new(sluice_testkit::minio::TEST_BUCKET);
            config.endpoint = Some(endpoint.clone());
            config.prefix = run_prefix.clone();
            sluice_store::s3::S3Store::connect(config).await
        };
        let fault = writes.to_string();
        let mut gateway = common::serve_on_minio_with_env(
            &endpoint,
            &run_prefix,
            "127.0.0.1:0",
            &args,
            &[("SLUICE_FAULT_EXIT_AFTER_STORE_WRITES", &fault)],
        );
        let signed = client
            .get(format!(
                "{}/s3/params?filename=crash-{writes}.bin",
                gateway.url
            ))
            .bearer_auth(&acme)
            .send()
            .await;
        let posted = match signed {
            Ok(answer) if answer.status() == 200 => {
                let signed: Value = answer.json().await.unwrap();
                assert_eq!(post_form(&signed, vec![7u8; 200 * 1024]).await, 204);
                true
            }
            // Killed on the signature's own record: nothing was handed out.
            _ => false,
        };
        if !gateway.died_within(Duration::from_secs(15)) {
            // The confirmation ended with fewer writes: every one was tried.
            assert!(kills >= 3, "only {kills} kills");
            assert_eq!(outbox(&run_store).await, 1, "the last run, unkilled");
            break;
        }
        kills += 1;
        drop(gateway);
        let restarted = Instant::now();
        let _again = common::serve_on_minio(&endpoint, &run_prefix, "127.0.0.1:0", &args);
        let want = usize::from(posted);
        loop {
            let events = outbox(&run_store).await;
            if events == want && restarted.elapsed() > Duration::from_secs(3) {
                break;
            }
            assert!(events <= want, "after write {writes}: {events} events");
            assert!(
                restarted.elapsed() < Duration::from_secs(20),
                "after write {writes}: no event within 20 s of the restart"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if posted {
            let listed = run_store.list_objects("acme/", None, 10).await.unwrap();
            assert_eq!(listed.objects.len(), 1, "after write {writes}");
        }
    }
    assert!(kills >= 4, "only {kills} kills");
    let _ = store;
}

/// `POST /s3/sign` for a CreateMultipartUpload asked with a `contentType`
/// signs that type: its answer's `headers` carry it (Uppy 6 sends them after
/// its own, so they win), the bucket takes the URL with that type and refuses
/// it with another, so the object's type is the one the pre-create hook and
/// the key template saw. Asked without one, the URL takes any type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_multipart_creation_pins_the_content_type_it_was_asked_with() {
    let Some((endpoint, prefix, store)) = common::minio_prefix("direct-sign-type").await else {
        return;
    };
    let (_secrets, secret) = common::secret_file(SECRET);
    let gateway = common::serve_on_minio(
        &endpoint,
        &prefix,
        "127.0.0.1:0",
        &["--direct", "--jwt-secret-file", &secret],
    );
    let client = reqwest::Client::new();
    let sign = |body: Value| {
        let (client, url, token) = (
            client.clone(),
            format!("{}/s3/sign", gateway.url),
            token("acme"),
        );
        async move {
            let answer = client
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 200);
            answer.json::<Value>().await.unwrap()
        }
    };
    let create = |signed: Value, content_type: &'static str| {
        let client = client.clone();
        async move {
            client
                .post(signed["url"].as_str().unwrap())
                .header("content-type", content_type)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let pinned = sign(json!({"method": "POST", "key": "a.png", "contentType": "image/png"})).await;
    assert_eq!(
        pinned["headers"],
        json!({"content-type": "image/png"}),
        "{pinned}"
    );
    // (what the browser sends, the bucket's answer)
    for (content_type, status) in [("text/html", 403), ("image/png", 200)] {
        assert_eq!(
            create(pinned.clone(), content_type).await,
            status,
            "{content_type}"
        );
    }
    // A type that is no header value is refused, not signed.
    let bad = client
        .post(format!("{}/s3/sign", gateway.url))
        .bearer_auth(token("acme"))
        .json(&json!({"method": "POST", "key": "c.bin", "contentType": "text/plain\r\nx-amz-acl: public-read"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let free = sign(json!({"method": "POST", "key": "b.bin"})).await;
    assert!(free.get("headers").is_none_or(Value::is_null), "{free}");
    assert_eq!(create(free, "text/plain").await, 200);
    // The two uploads created; each is aborted by the test.
    let uploads = store.list_multipart_uploads("acme/").await.unwrap();
    assert_eq!(uploads.len(), 2, "{uploads:?}");
    for upload in uploads {
        store
            .abort_multipart_upload(&upload.key, &upload.upload_id)
            .await
            .unwrap();
    }
}
