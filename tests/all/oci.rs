//! Modules in an OCI registry (`gatehouse-registry`) against a real one:
//! Debian's `docker-registry` (distribution 2.8) started on loopback by
//! `gatehouse_tests::oci_registry`, plain, with TLS from a CA of the test,
//! and with basic auth; and against hostile registries written here (a stall,
//! 5xx answers, a redirect to wrong bytes).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gatehouse_registry::{Access, Digest, ModuleRef, Registry, RegistryError, Store};
use gatehouse_tests::oci_registry::{self, Options, PASSWORD, USER};

fn guardian() -> Vec<u8> {
    std::fs::read(gatehouse_tests::guest("gatehouse_guardian")).expect("the built guardian")
}

/// Access that never reads the caller's environment or Docker config.
fn quiet() -> gatehouse_registry::AccessBuilder {
    Access::builder()
        .environment(false)
        .docker_config("/nonexistent/config.json")
        .retry_delay(Duration::from_millis(20))
}

/// An empty store in a directory of its own (kept while the guard lives).
fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("store dir");
    let store = Store::open(dir.path().join("store")).expect("store");
    (dir, store)
}

fn reference(registry: &str, rest: &str) -> ModuleRef {
    format!("{registry}/{rest}").parse().expect("reference")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn a_module_pushed_to_a_real_registry_pulls_back_verified_into_the_store() {
    let Some(server) = oci_registry::Registry::start(Options::default()) else {
        return;
    };
    let registry = Registry::new(quiet().build()).expect("client");
    let (_store_dir, store) = store();
    let component = guardian();
    let tagged = reference(&server.address, "team/guardian:1.0");
    runtime().block_on(async {
        let pushed = registry.push(&tagged, &component).await.expect("push");
        assert_eq!(pushed.layer_digest, Digest::of(&component));
        assert_eq!(
            registry.resolve(&tagged).await.expect("resolve"),
            pushed.manifest_digest
        );
        let pulled = registry.pull(&tagged, &store).await.expect("pull");
        assert_eq!(pulled.manifest_digest, pushed.manifest_digest);
        assert_eq!(pulled.layer_digest, pushed.layer_digest);
        assert_eq!(
            store.get(&pulled.layer_digest).expect("in the store"),
            component
        );
        assert!(store.contains(&pulled.manifest_digest) && store.contains(&pulled.config_digest));
        // By digest too, and a wrong digest is refused naming the reference.
        let pinned = tagged.pinned(&pushed.manifest_digest);
        let again = registry
            .pull(&pinned, &store)
            .await
            .expect("pull by digest");
        assert_eq!(
            again,
            gatehouse_registry::Pulled {
                reference: pinned,
                ..pulled
            }
        );
        let wrong = reference(
            &server.address,
            &format!("team/guardian@{}", Digest::of(b"something else")),
        );
        let err = registry
            .pull(&wrong, &store)
            .await
            .expect_err("no such manifest");
        assert!(err.to_string().contains("team/guardian@sha256:"), "{err}");
    });
}

#[test]
fn a_tls_registry_with_basic_auth_needs_its_ca_and_the_docker_config_credentials() {
    let Some(server) = oci_registry::Registry::start(Options {
        tls: true,
        auth: true,
    }) else {
        return;
    };
    let component = guardian();
    // `localhost` by name, so TLS checks the certificate's name too.
    let port = server.address.rsplit(':').next().expect("port");
    let tagged = reference(&format!("localhost:{port}"), "team/guardian:2");
    let (store_dir, store) = store();
    let docker = oci_registry::docker_config(
        &store_dir.path().join("docker"),
        &format!("localhost:{port}"),
        USER,
        PASSWORD,
    );
    runtime().block_on(async {
        // Without the CA: the certificate is not trusted, and that is said;
        // a registry that speaks TLS is never retried over plain HTTP, even
        // on loopback.
        let no_ca = Registry::new(quiet().docker_config(docker.join("config.json")).build())
            .expect("client");
        let err = no_ca.push(&tagged, &component).await.expect_err("no CA");
        eprintln!("without the CA: {err}");
        assert!(err.to_string().contains("certificate"), "{err}");
        // With the CA but no credentials: refused, naming the reference.
        let no_creds = Registry::new(quiet().ca_file(server.ca_file()).build()).expect("client");
        let err = no_creds
            .push(&tagged, &component)
            .await
            .expect_err("unauthorized");
        let text = err.to_string();
        eprintln!("without credentials: {text}");
        assert!(
            text.starts_with(&tagged.to_string()) && text.contains("refused the credentials"),
            "{text}"
        );
        // A wrong password from the Docker config is refused too.
        let wrong = oci_registry::docker_config(
            &store_dir.path().join("docker-wrong"),
            &format!("localhost:{port}"),
            USER,
            "not the password",
        );
        let wrong = Registry::new(
            quiet()
                .ca_file(server.ca_file())
                .docker_config(wrong.join("config.json"))
                .build(),
        )
        .expect("client");
        let err = wrong
            .push(&tagged, &component)
            .await
            .expect_err("wrong password");
        eprintln!("with a wrong password: {err}");
        assert!(err.to_string().contains("refused the credentials"), "{err}");
        // The CA and the Docker config's credentials: it works.
        let good = Registry::new(
            quiet()
                .ca_file(server.ca_file())
                .docker_config(docker.join("config.json"))
                .build(),
        )
        .expect("client");
        let pushed = good.push(&tagged, &component).await.expect("push");
        let pulled = good.pull(&tagged, &store).await.expect("pull");
        assert_eq!(pulled.manifest_digest, pushed.manifest_digest);
        assert_eq!(store.get(&pulled.layer_digest).expect("stored"), component);
    });
}

#[test]
fn a_blob_corrupted_in_the_registry_is_refused_and_nothing_unverified_is_stored() {
    let Some(server) = oci_registry::Registry::start(Options::default()) else {
        return;
    };
    let registry = Registry::new(quiet().build()).expect("client");
    let (_store_dir, store) = store();
    let component = guardian();
    let tagged = reference(&server.address, "team/guardian:bad");
    runtime().block_on(async {
        let pushed = registry.push(&tagged, &component).await.expect("push");
        // distribution keeps blobs at blobs/sha256/XX/HEX/data.
        let hex = pushed.layer_digest.hex();
        let data = server
            .storage()
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data");
        let mut bytes = std::fs::read(&data).expect("the registry's blob");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        std::fs::write(&data, bytes).expect("corrupt it");
        let err = registry.pull(&tagged, &store).await.expect_err("mismatch");
        assert!(
            matches!(
                err,
                RegistryError::Mismatch {
                    what: "component",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("team/guardian:bad"), "{err}");
        assert!(!store.contains(&pushed.layer_digest));
        assert!(
            !store.contains(&pushed.manifest_digest),
            "no manifest without its blobs"
        );
    });
}

#[test]
fn manifests_outside_the_wasm_layout_and_oversized_modules_are_refused_before_any_blob() {
    let Some(server) = oci_registry::Registry::start(Options::default()) else {
        return;
    };
    let component = guardian();
    let tagged = reference(&server.address, "team/big:1");
    let (_store_dir, store) = store();
    runtime().block_on(async {
        let registry = Registry::new(quiet().build()).expect("client");
        registry.push(&tagged, &component).await.expect("push");
        let small = Registry::new(quiet().max_module_bytes(1024).build()).expect("client");
        let err = small.pull(&tagged, &store).await.expect_err("too big");
        assert!(
            err.to_string().contains("over the 1024-byte limit"),
            "{err}"
        );
        assert!(store.digests().expect("list").is_empty());

        // A container image's manifest (another config media type), pushed
        // with oci-client directly.
        let image = reference(&server.address, "team/image:1");
        let client = oci_client::Client::new(oci_client::client::ClientConfig {
            protocol: oci_client::client::ClientProtocol::Http,
            ..Default::default()
        });
        let layer = oci_client::client::ImageLayer::oci_v1(component.clone(), None);
        let config = oci_client::client::Config::oci_v1(b"{}".to_vec(), None);
        client
            .push(
                &image.to_string().parse().expect("oci ref"),
                &[layer.clone(), layer],
                config,
                &oci_client::secrets::RegistryAuth::Anonymous,
                None,
            )
            .await
            .expect("push an image");
        let err = registry.pull(&image, &store).await.expect_err("not wasm");
        let text = err.to_string();
        assert!(
            text.starts_with(&image.to_string()) && text.contains("container image"),
            "{text}"
        );
        assert!(store.digests().expect("list").is_empty());

        // The Wasm config and media types, but two components.
        let doubled = reference(&server.address, "team/doubled:1");
        let wasm = |bytes: Vec<u8>| {
            oci_client::client::ImageLayer::new(
                bytes,
                gatehouse_registry::layout::LAYER_MEDIA_TYPE.to_owned(),
                None,
            )
        };
        let config = oci_client::client::Config::new(
            br#"{"architecture":"wasm","os":"wasip2"}"#.to_vec(),
            gatehouse_registry::layout::CONFIG_MEDIA_TYPE.to_owned(),
            None,
        );
        client
            .push(
                &doubled.to_string().parse().expect("oci ref"),
                &[wasm(component.clone()), wasm(b"\0asm\x0d\0\x01\0".to_vec())],
                config,
                &oci_client::secrets::RegistryAuth::Anonymous,
                None,
            )
            .await
            .expect("push two layers");
        let err = registry
            .pull(&doubled, &store)
            .await
            .expect_err("two layers");
        let text = err.to_string();
        assert!(
            text.starts_with(&doubled.to_string()) && text.contains("2 layers"),
            "{text}"
        );
        assert!(store.digests().expect("list").is_empty());
    });
}

/// A registry that answers `/v2/` and then `status` to everything, counting
/// the requests.
async fn failing_registry(status: u16) -> (String, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let seen = seen.clone();
        async move {
            if request.uri().path() == "/v2/" {
                return axum::http::StatusCode::OK.into_response();
            }
            seen.fetch_add(1, Ordering::SeqCst);
            (
                axum::http::StatusCode::from_u16(status).expect("status"),
                "\u{1b}[31mupstream exploded",
            )
                .into_response()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, count)
}

use axum::response::IntoResponse as _;

#[test]
fn a_registry_answering_5xx_is_retried_a_bounded_number_of_times_then_named() {
    runtime().block_on(async {
        let (address, count) = failing_registry(503).await;
        let registry = Registry::new(quiet().attempts(3).build()).expect("client");
        let (_store_dir, store) = store();
        let tagged = reference(&address, "team/guardian:1");
        let err = registry.pull(&tagged, &store).await.expect_err("5xx");
        let text = err.to_string();
        assert!(
            text.starts_with(&tagged.to_string()) && text.contains("503"),
            "{text}"
        );
        assert!(
            !text.contains('\u{1b}'),
            "the registry's text is escaped: {text:?}"
        );
        assert_eq!(count.load(Ordering::SeqCst), 3, "three attempts, no more");
        // A 404 is not retried.
        let (address, count) = failing_registry(404).await;
        let tagged = reference(&address, "team/guardian:1");
        registry.pull(&tagged, &store).await.expect_err("404");
        assert_eq!(count.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn a_registry_that_stalls_is_cut_off_by_the_operation_bound() {
    runtime().block_on(async {
        // Accepts connections and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let registry = Registry::new(
            quiet()
                .operation_timeout(Duration::from_millis(700))
                .build(),
        )
        .expect("client");
        let (_store_dir, store) = store();
        let tagged = reference(&address, "team/guardian:1");
        let err = registry.pull(&tagged, &store).await.expect_err("stalls");
        assert!(matches!(err, RegistryError::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("team/guardian:1"), "{err}");
    });
}

#[test]
fn a_blob_redirected_to_another_server_with_other_bytes_is_refused() {
    runtime().block_on(async {
        let component = guardian();
        let artifact =
            gatehouse_registry::layout::Artifact::from_component(&component).expect("layout");
        // The elsewhere: serves different bytes for every path.
        let elsewhere = axum::Router::new().fallback(|| async { "not the module".repeat(10) });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let other = listener.local_addr().expect("address").to_string();
        tokio::spawn(async move { axum::serve(listener, elsewhere).await });
        // The registry: a true manifest, and every blob redirected.
        let manifest = artifact.manifest_bytes.clone();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let manifest = manifest.clone();
            let other = other.clone();
            async move {
                let path = request.uri().path().to_owned();
                if path == "/v2/" {
                    axum::http::StatusCode::OK.into_response()
                } else if path.contains("/manifests/") {
                    (
                        [(
                            "content-type",
                            gatehouse_registry::layout::MANIFEST_MEDIA_TYPE,
                        )],
                        manifest,
                    )
                        .into_response()
                } else {
                    axum::response::Redirect::temporary(&format!("http://{other}/blob"))
                        .into_response()
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let registry = Registry::new(quiet().build()).expect("client");
        let (_store_dir, store) = store();
        let tagged = reference(&address, "team/guardian:1");
        let err = registry
            .pull(&tagged, &store)
            .await
            .expect_err("wrong bytes");
        assert!(matches!(err, RegistryError::Mismatch { .. }), "{err}");
        assert!(store.digests().expect("list").is_empty());
    });
}

/// oras (the ORAS project's Python client) pushes a component the way it
/// pushes any artifact: the file as one layer with the media type given,
/// and a config file with its own.
const ORAS_PUSH: &str = r#"
import json, os, sys, tempfile, oras.client
target, wasm = sys.argv[1], sys.argv[2]
work = tempfile.mkdtemp()
config = os.path.join(work, "config.json")
with open(config, "w") as f:
    json.dump({"architecture": "wasm", "os": "wasip2"}, f)
os.chdir(os.path.dirname(wasm))
client = oras.client.OrasClient(insecure=True)
client.push(target=target, files=[os.path.basename(wasm) + ":application/wasm"],
            manifest_config=config + ":application/vnd.wasm.config.v0+json",
            disable_path_validation=True)
"#;

/// oras pulls an artifact's layers into a directory and checks the layout.
const ORAS_PULL: &str = r#"
import json, sys, oras.client
target, outdir = sys.argv[1], sys.argv[2]
client = oras.client.OrasClient(insecure=True)
manifest = client.get_manifest(target)
assert manifest["config"]["mediaType"] == "application/vnd.wasm.config.v0+json", manifest
assert [l["mediaType"] for l in manifest["layers"]] == ["application/wasm"], manifest
for path in client.pull(target=target, outdir=outdir):
    print(path)
"#;

#[test]
fn an_artifact_oras_pushed_pulls_and_reviews_and_oras_pulls_ours() {
    let Some(server) = oci_registry::Registry::start(Options::default()) else {
        return;
    };
    let Some(python) = oci_registry::oras_python() else {
        return;
    };
    let component = guardian();
    let work = tempfile::tempdir().expect("work");
    let wasm = work.path().join("guardian.wasm");
    std::fs::write(&wasm, &component).expect("write");
    let store = Store::open(work.path().join("store")).expect("store");
    let registry = Registry::new(quiet().build()).expect("client");

    // Theirs, pulled by us, runs.
    let theirs = reference(&server.address, "interop/theirs:1");
    oci_registry::oras(
        &python,
        ORAS_PUSH,
        &[&theirs.to_string(), wasm.to_str().expect("utf-8")],
    );
    let pulled = runtime()
        .block_on(registry.pull(&theirs, &store))
        .expect("pull what oras pushed");
    let bytes = store.get(&pulled.layer_digest).expect("stored");
    assert_eq!(bytes, component);
    let sandbox = gatehouse_tests::sandbox();
    let module = sandbox
        .load_bytes("theirs", &theirs.to_string(), &bytes, None)
        .expect("loads");
    let report = module.review("{}", &gatehouse_tests::approval_request());
    assert!(report.result.is_ok(), "{:?}", report.result);

    // Ours, pulled by oras, is the same bytes.
    let ours = reference(&server.address, "interop/ours:1");
    runtime()
        .block_on(registry.push(&ours, &component))
        .expect("push");
    let out = work.path().join("out");
    let listed = oci_registry::oras(
        &python,
        ORAS_PULL,
        &[&ours.to_string(), out.to_str().expect("utf-8")],
    );
    let files: Vec<&str> = listed.lines().collect();
    assert_eq!(files.len(), 1, "{listed}");
    assert_eq!(std::fs::read(files[0]).expect("oras wrote it"), component);
}

/// An independent implementation of cosign's key-based signature format
/// (pyca/cryptography for ECDSA P-256, oras for the registry), written from
/// cosign's specification, not from ours: `sign` makes a key pair, signs the
/// simple-signing payload of a digest and pushes it to `sha256-HEX.sig`;
/// `verify` checks every signature there against a public key.
const COSIGN_FORMAT: &str = r#"
import base64, json, os, sys, tempfile
import oras.client
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

command, repository, digest, key_file = sys.argv[1:5]
client = oras.client.OrasClient(insecure=True)
sig_tag = repository + ":" + digest.replace(":", "-") + ".sig"
if command == "sign":
    key = ec.generate_private_key(ec.SECP256R1())
    with open(key_file, "wb") as f:
        f.write(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    payload = json.dumps({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": None,
    }).encode()
    signature = base64.b64encode(key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
    work = tempfile.mkdtemp()
    os.chdir(work)
    with open("payload.json", "wb") as f:
        f.write(payload)
    with open("config.json", "w") as f:
        json.dump({"architecture": "", "os": "", "rootfs": {"type": "layers", "diff_ids": []}, "config": {}}, f)
    with open("annotations.json", "w") as f:
        json.dump({"payload.json": {"dev.cosignproject.cosign/signature": signature}}, f)
    client.push(target=sig_tag,
                files=["payload.json:application/vnd.dev.cosign.simplesigning.v1+json"],
                manifest_config="config.json:application/vnd.oci.image.config.v1+json",
                annotation_file="annotations.json", disable_path_validation=True)
elif command == "verify":
    with open(key_file, "rb") as f:
        public = serialization.load_pem_public_key(f.read())
    manifest = client.get_manifest(sig_tag)
    verified = 0
    for layer in manifest["layers"]:
        assert layer["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json", layer
        payload = client.get_blob(sig_tag, layer["digest"]).content
        claims = json.loads(payload)
        assert claims["critical"]["image"]["docker-manifest-digest"] == digest, claims
        assert claims["critical"]["type"] == "cosign container image signature", claims
        signature = base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"])
        try:
            public.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
            verified += 1
        except Exception:
            pass
    assert verified > 0, "no signature verifies with the key"
    print(verified, len(manifest["layers"]))
"#;

#[test]
fn cosign_format_signatures_verify_across_implementations() {
    use gatehouse_registry::signature::{self, PublicKey, SigningKey};
    let Some(server) = oci_registry::Registry::start(Options::default()) else {
        return;
    };
    let Some(python) = oci_registry::oras_python() else {
        return;
    };
    let registry = Registry::new(quiet().build()).expect("client");
    let work = tempfile::tempdir().expect("work");
    let component = guardian();

    // Theirs: signed by the independent implementation, verified by ours.
    let theirs = reference(&server.address, "interop/signed-by-them:1");
    let pushed = runtime()
        .block_on(registry.push(&theirs, &component))
        .expect("push");
    let their_key = work.path().join("theirs.pub");
    oci_registry::oras(
        &python,
        COSIGN_FORMAT,
        &[
            "sign",
            &theirs.name(),
            &pushed.manifest_digest.to_string(),
            their_key.to_str().expect("utf-8"),
        ],
    );
    let trusted = PublicKey::from_pem(
        "theirs",
        &std::fs::read(&their_key).expect("their public key"),
    )
    .expect("a public key");
    let layers = runtime()
        .block_on(registry.signatures(&theirs, &pushed.manifest_digest))
        .expect("signatures");
    assert_eq!(layers.len(), 1);
    let signer = signature::verify(
        &pushed.manifest_digest,
        &layers,
        std::slice::from_ref(&trusted),
    )
    .expect("their signature verifies with ours");
    assert_eq!(signer.name, "theirs");
    // And it is theirs only: another digest is not signed by it.
    assert!(signature::verify(&Digest::of(b"other"), &layers, &[trusted]).is_err());

    // Ours: signed by us with two keys (the second appended, as cosign
    // does), each verified by theirs; a third key verifies nothing.
    let ours = reference(&server.address, "interop/signed-by-us:1");
    let pushed = runtime()
        .block_on(registry.push(&ours, &component))
        .expect("push");
    let verify_with = |key: &SigningKey| {
        let file = work.path().join("ours.pub");
        std::fs::write(&file, key.public_pem()).expect("public key");
        std::process::Command::new(&python)
            .arg("-c")
            .arg(COSIGN_FORMAT)
            .args([
                "verify",
                &ours.name(),
                &pushed.manifest_digest.to_string(),
                file.to_str().expect("utf-8"),
            ])
            .output()
            .expect("python runs")
    };
    let keys = [
        SigningKey::generate().expect("key"),
        SigningKey::generate().expect("key"),
    ];
    for key in &keys {
        let layer = key.sign(&ours, &pushed.manifest_digest).expect("sign");
        runtime()
            .block_on(registry.push_signature(&ours, &pushed.manifest_digest, &layer))
            .expect("push the signature");
    }
    for key in &keys {
        let output = verify_with(key);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "1 2");
    }
    assert!(
        !verify_with(&SigningKey::generate().expect("key"))
            .status
            .success()
    );
}
