//! `gatehouse modules`: reviewer modules as OCI artifacts. `push` publishes
//! a component, `pull` brings one into the store, `gc` removes from the
//! store what the lock file does not name.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use gatehouse_base::escape::escape;
use gatehouse_gateway::config::Config;
use gatehouse_registry::lock::Lock;
use gatehouse_registry::{ModuleRef, Registry, Store};

/// Publish reviewer modules to OCI registries and keep the local store.
///
/// A module is stored in a registry as `wkg oci` and `oras` store Wasm
/// components: an OCI image manifest with the config media type
/// `application/vnd.wasm.config.v0+json` and one `application/wasm` layer.
/// References name their registry: `HOST[:PORT]/REPO:TAG` or
/// `HOST[:PORT]/REPO@sha256:…`. Registries are HTTPS (the platform's roots
/// plus `[registry] ca_files`); plain HTTP only for loopback and the hosts
/// in `[registry] insecure`. Credentials: `GATEHOUSE_REGISTRY_USERNAME` and
/// `GATEHOUSE_REGISTRY_PASSWORD`, else the Docker config (`docker login`).
#[derive(Debug, clap::Args)]
pub struct ModulesArgs {
    #[command(subcommand)]
    command: ModulesCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ModulesCommand {
    /// Publish a component file at a reference; prints the manifest digest
    /// (`REF@sha256:…` pins exactly this artifact).
    Push(PushArgs),
    /// Fetch the module a reference names into the store, verified; prints
    /// what the tag resolved to.
    Pull(PullArgs),
    /// Remove from the store every blob the lock file does not name.
    Gc(GcArgs),
    /// Re-resolve the config's `oci` modules, pull what changed, check each
    /// candidate's signature against the `[trust]` policy and prove it with
    /// the conformance kit, and only if all pass write
    /// `gatehouse.lock` and have every running `gatehouse serve` on the
    /// config swap to it (a validated swap: the old chain serves until the
    /// new one is ready, no review is dropped). A candidate that fails any
    /// step is refused with the reason, and nothing changes.
    Update(UpdateArgs),
    /// Sign the artifact a reference names with a cosign private key, and
    /// store the signature beside it (`sha256-HEX.sig`, as cosign does).
    /// The key's password is read from COSIGN_PASSWORD.
    Sign(SignArgs),
    /// Check the signatures of the artifact a reference names against the
    /// config's `[trust]` policy; prints the signer.
    Verify(VerifyArgs),
    /// Make a signing key pair in cosign's formats: PREFIX.key (encrypted
    /// with COSIGN_PASSWORD, 0600) and PREFIX.pub.
    Keygen(KeygenArgs),
}

#[derive(Debug, clap::Args)]
struct SignArgs {
    /// What to sign: `HOST[:PORT]/REPO:TAG` (the digest it resolves to now
    /// is signed) or `…@sha256:…`.
    reference: String,
    /// The private key (cosign's encrypted PEM).
    #[arg(long, value_name = "cosign.key")]
    key: PathBuf,
    #[command(flatten)]
    place: Place,
}

#[derive(Debug, clap::Args)]
struct VerifyArgs {
    /// What to verify.
    reference: String,
    /// The config whose `[trust]` and `[registry]` apply.
    #[arg(long, value_name = "gatehouse.toml")]
    config: PathBuf,
}

#[derive(Debug, clap::Args)]
struct KeygenArgs {
    /// Where the pair goes: PREFIX.key and PREFIX.pub.
    #[arg(long, value_name = "PREFIX", default_value = "cosign")]
    output_key_prefix: PathBuf,
}

/// Where the `[registry]` settings and the store come from.
#[derive(Debug, clap::Args)]
struct Place {
    /// The config whose `[registry]` section applies; the store is beside
    /// it (default `.gatehouse/store`). Without one: no settings, and the
    /// store `.gatehouse/store` in the current directory.
    #[arg(long, value_name = "gatehouse.toml")]
    config: Option<PathBuf>,
    /// Also allow plain HTTP to this registry host (repeatable).
    #[arg(long, value_name = "HOST[:PORT]")]
    insecure: Vec<String>,
    /// Also trust this CA (PEM; repeatable).
    #[arg(long, value_name = "FILE")]
    ca_file: Vec<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct PushArgs {
    /// The component (`.wasm`).
    file: PathBuf,
    /// Where to publish it: `HOST[:PORT]/REPO:TAG`.
    reference: String,
    #[command(flatten)]
    place: Place,
}

#[derive(Debug, clap::Args)]
struct PullArgs {
    /// What to fetch: `HOST[:PORT]/REPO:TAG` or `…@sha256:…`.
    reference: String,
    #[command(flatten)]
    place: Place,
}

#[derive(Debug, clap::Args)]
struct GcArgs {
    /// The config beside which the store and `gatehouse.lock` are.
    #[arg(long, value_name = "gatehouse.toml")]
    config: PathBuf,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Debug, clap::Args)]
struct UpdateArgs {
    /// The config whose `oci` modules are updated; `gatehouse.lock` is
    /// beside it.
    #[arg(long, value_name = "gatehouse.toml")]
    config: PathBuf,
    /// Cases of the operator's own (a directory of case files, as
    /// `gatehouse conformance --cases`) each candidate must pass too
    /// (repeatable).
    #[arg(long, value_name = "DIR")]
    cases: Vec<PathBuf>,
    /// Write the lock but leave running instances alone (they take it at
    /// their next reload).
    #[arg(long)]
    no_reload: bool,
}

pub fn run(args: ModulesArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ModulesCommand::Push(args) => push(args),
        ModulesCommand::Pull(args) => pull(args),
        ModulesCommand::Gc(args) => gc(args),
        ModulesCommand::Update(args) => update(args),
        ModulesCommand::Sign(args) => sign(args),
        ModulesCommand::Verify(args) => verify(args),
        ModulesCommand::Keygen(args) => keygen(args),
    }
}

/// The `[registry]` section and the directory its relative paths start
/// from, the command line's additions applied.
struct Settings {
    registry: gatehouse_registry::config::RegistryConfig,
    base_dir: PathBuf,
}

impl Place {
    fn settings(&self) -> anyhow::Result<Settings> {
        let (mut registry, base_dir) = match &self.config {
            Some(path) => {
                let config = Config::load(path)?;
                (config.registry.clone(), config.base_dir().to_path_buf())
            }
            None => (Default::default(), PathBuf::from(".")),
        };
        registry.insecure.extend(self.insecure.iter().cloned());
        let cwd = std::env::current_dir().context("cannot tell the current directory")?;
        registry
            .ca_files
            .extend(self.ca_file.iter().map(|file| cwd.join(file)));
        Ok(Settings { registry, base_dir })
    }
}

impl Settings {
    fn registry(&self) -> anyhow::Result<Registry> {
        Ok(Registry::new(self.registry.access(&self.base_dir))?)
    }

    fn store(&self) -> anyhow::Result<Store> {
        Ok(Store::open(self.registry.store_dir(&self.base_dir))?
            .with_max_blob_bytes(self.registry.access(&self.base_dir).max_module_bytes()))
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn reference(text: &str) -> anyhow::Result<ModuleRef> {
    Ok(text.parse::<ModuleRef>()?)
}

fn push(args: PushArgs) -> anyhow::Result<ExitCode> {
    let reference = reference(&args.reference)?;
    let settings = args.place.settings()?;
    let component = read_component(&args.file)?;
    let registry = settings.registry()?;
    eprintln!(
        "pushing {} ({} bytes) to {}",
        escape(&args.file.display().to_string()),
        component.len(),
        escape(&reference.to_string())
    );
    let pushed = runtime()?.block_on(registry.push(&reference, &component))?;
    println!(
        "{}",
        escape(&reference.pinned(&pushed.manifest_digest).to_string())
    );
    eprintln!("component {}", pushed.layer_digest);
    Ok(ExitCode::SUCCESS)
}

fn read_component(path: &Path) -> anyhow::Result<Vec<u8>> {
    let limit = gatehouse_registry::access::DEFAULT_MAX_MODULE_BYTES;
    let metadata = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", escape(&path.display().to_string())))?;
    anyhow::ensure!(
        metadata.len() <= limit,
        "{} is {} bytes, over the {limit}-byte module limit",
        escape(&path.display().to_string()),
        metadata.len()
    );
    std::fs::read(path)
        .with_context(|| format!("cannot read {}", escape(&path.display().to_string())))
}

fn pull(args: PullArgs) -> anyhow::Result<ExitCode> {
    let reference = reference(&args.reference)?;
    let settings = args.place.settings()?;
    let registry = settings.registry()?;
    let store = settings.store()?;
    eprintln!("pulling {}", escape(&reference.to_string()));
    let pulled = runtime()?.block_on(registry.pull(&reference, &store))?;
    println!(
        "{}",
        escape(&reference.pinned(&pulled.manifest_digest).to_string())
    );
    eprintln!(
        "component {} ({} bytes) in {}",
        pulled.layer_digest,
        pulled.size,
        escape(&store.root().display().to_string())
    );
    Ok(ExitCode::SUCCESS)
}

fn gc(args: GcArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(&args.config)?;
    let lock_path = Lock::path_beside(&args.config);
    let keep = Lock::read(&lock_path)?
        .map(|lock| lock.digests())
        .unwrap_or_default();
    let store = Store::open(config.registry.store_dir(config.base_dir()))?;
    if args.dry_run {
        let doomed: Vec<_> = store
            .digests()?
            .into_iter()
            .filter(|digest| !keep.contains(digest))
            .collect();
        for digest in &doomed {
            println!("would remove {digest}");
        }
        eprintln!(
            "{} of the store's blobs are not in {}",
            doomed.len(),
            escape(&lock_path.display().to_string())
        );
        return Ok(ExitCode::SUCCESS);
    }
    let report = store.gc(&keep)?;
    println!(
        "kept {} blobs, removed {} files ({} bytes)",
        report.kept, report.removed, report.removed_bytes
    );
    Ok(ExitCode::SUCCESS)
}

/// What `update` decided for one `oci` entry.
pub struct Candidate {
    index: usize,
    entry: gatehouse_registry::lock::LockedModule,
    previous: Option<gatehouse_registry::lock::LockedModule>,
}

fn update(args: UpdateArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(&args.config)?;
    let mut extra = Vec::new();
    for dir in &args.cases {
        extra.extend(gatehouse_conformance::cases::load_dir(dir)?);
    }
    let lock_path = config.lock_path();
    let old = Lock::read(&lock_path)?;
    let candidates = match check_candidates(&config, &extra, old.as_ref())? {
        Ok(candidates) => candidates,
        Err(refused) => {
            for reason in &refused {
                eprintln!("gatehouse: refused: {reason}");
            }
            eprintln!(
                "gatehouse: nothing changed: {} is as it was",
                escape(&lock_path.display().to_string())
            );
            return Ok(ExitCode::from(1));
        }
    };
    write_lock(&lock_path, old.as_ref(), &candidates)?;
    if args.no_reload {
        return Ok(ExitCode::SUCCESS);
    }
    match super::reload::reload_running(&config, None)? {
        None => {
            println!(
                "no gatehouse serve is running on this config; each takes the lock when it starts"
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(true) => Ok(ExitCode::SUCCESS),
        Some(false) => Ok(ExitCode::from(1)),
    }
}

/// Resolves every `oci` module of `config`, pulls it into the store,
/// verifies it against `[trust]` and proves it with the conformance kit
/// (plus `extra` cases): the lock entries when every one passed, else every
/// reason one was refused.
pub fn check_candidates(
    config: &Config,
    extra: &[(PathBuf, gatehouse_conformance::cases::Case)],
    old: Option<&Lock>,
) -> anyhow::Result<Result<Vec<Candidate>, Vec<String>>> {
    use gatehouse_core::config::ModuleSource;
    let access = config.registry.access(config.base_dir());
    let store = Store::open(config.store_dir())?.with_max_blob_bytes(access.max_module_bytes());
    let registry = Registry::new(access)?;
    let policy = config.trust.policy(config.base_dir())?;
    let runtime = runtime()?;
    let mut candidates = Vec::new();
    let mut refused = Vec::new();
    for (index, spec) in config.review.modules.iter().enumerate() {
        let Ok(ModuleSource::Oci(text)) = spec.source() else {
            continue;
        };
        let shown = escape(text).into_owned();
        let reference = reference(text)?;
        eprintln!("review.modules[{index}]: resolving {shown}");
        let pulled = match runtime.block_on(registry.pull(&reference, &store)) {
            Ok(pulled) => pulled,
            Err(err) => {
                refused.push(format!("review.modules[{index}]: {err}"));
                continue;
            }
        };
        let signer = match runtime.block_on(trusted_signer(
            &registry,
            &policy,
            &reference,
            &pulled.manifest_digest,
        )) {
            Ok(signer) => signer,
            Err(err) => {
                refused.push(format!("review.modules[{index}]: {err:#}"));
                continue;
            }
        };
        let bytes = store.get(&pulled.layer_digest)?;
        let source = format!("{shown}@{}", pulled.manifest_digest);
        // The serving sandbox's cache: what the kit compiles, the swap
        // finds compiled.
        let kit = gatehouse_conformance::Kit::from_builder(config.sandbox_builder())?
            .with_module_limits(spec.module_limits())
            .with_module_config(spec.config_json());
        let report = kit.run(&source, &bytes, gatehouse_conformance::Suite::All, extra);
        if !report.passed() {
            let failures = report.failures_line();
            refused.push(format!(
                "review.modules[{index}]: {source} fails the conformance kit: {}",
                escape(&failures)
            ));
            continue;
        }
        let checks = report.results.len();
        eprintln!("review.modules[{index}]: {source}: the kit passed it ({checks} checks)");
        candidates.push(Candidate {
            index,
            previous: old.and_then(|lock| lock.find(text)).cloned(),
            entry: gatehouse_registry::lock::LockedModule {
                reference: text.to_owned(),
                manifest: pulled.manifest_digest,
                component: pulled.layer_digest,
                config: pulled.config_digest,
                signer: signer.map(|signer| signer.to_string()),
                kit: Some(format!("passed {checks} checks")),
            },
        });
    }
    Ok(if refused.is_empty() {
        Ok(candidates)
    } else {
        Err(refused)
    })
}

/// Writes the lock of `candidates` to `lock_path` (unless it is `old`
/// already), printing each change.
pub fn write_lock(
    lock_path: &Path,
    old: Option<&Lock>,
    candidates: &[Candidate],
) -> anyhow::Result<()> {
    let mut lock = Lock::default();
    for candidate in candidates {
        lock.set(candidate.entry.clone());
        let change = match &candidate.previous {
            Some(previous) if previous.manifest == candidate.entry.manifest => {
                "unchanged".to_owned()
            }
            Some(previous) => format!("{} -> {}", previous.manifest, candidate.entry.manifest),
            None => format!("new at {}", candidate.entry.manifest),
        };
        println!(
            "review.modules[{}]: {} {change}",
            candidate.index,
            escape(&candidate.entry.reference)
        );
    }
    if old == Some(&lock) {
        println!("the lock is current");
    } else {
        lock.write(lock_path)?;
        println!("wrote {}", escape(&lock_path.display().to_string()));
    }
    Ok(())
}

/// The signer of `manifest` that `policy` asks for: `Some` when one of the
/// rule's keys signed it, `None` when the rule allows unsigned and none did;
/// an error (with the reason) when the policy refuses it.
async fn trusted_signer(
    registry: &Registry,
    policy: &gatehouse_registry::trust::TrustPolicy,
    reference: &ModuleRef,
    manifest: &gatehouse_registry::Digest,
) -> anyhow::Result<Option<gatehouse_registry::signature::Signer>> {
    use gatehouse_registry::trust::Requirement;
    let shown = escape(&reference.to_string()).into_owned();
    match policy.requirement(reference) {
        Requirement::NoRule => anyhow::bail!(
            "{shown}: no [[trust.rules]] matches {}; add a rule naming the keys that sign it (or `allow_unsigned = true` for a registry of your own)",
            escape(&reference.name())
        ),
        Requirement::Signed { rule, keys } => {
            let layers = registry.signatures(reference, manifest).await?;
            let signer =
                gatehouse_registry::signature::verify(manifest, &layers, keys).map_err(|err| {
                    anyhow::anyhow!("{shown}: refused by the [[trust.rules]] {rule:?}: {err}")
                })?;
            Ok(Some(signer))
        }
        Requirement::Optional { keys, .. } => {
            if keys.is_empty() {
                return Ok(None);
            }
            let layers = registry.signatures(reference, manifest).await?;
            Ok(gatehouse_registry::signature::verify(manifest, &layers, keys).ok())
        }
    }
}

/// The password of a cosign private key, from COSIGN_PASSWORD.
fn key_password() -> anyhow::Result<Vec<u8>> {
    std::env::var_os("COSIGN_PASSWORD")
        .map(|password| password.into_encoded_bytes())
        .ok_or_else(|| anyhow::anyhow!("set COSIGN_PASSWORD to the key's password"))
}

fn sign(args: SignArgs) -> anyhow::Result<ExitCode> {
    let reference = reference(&args.reference)?;
    let settings = args.place.settings()?;
    let registry = settings.registry()?;
    let shown_key = escape(&args.key.display().to_string()).into_owned();
    let pem = gatehouse_base::private_fs::read(&args.key, 64 << 10)
        .with_context(|| format!("cannot read the key {shown_key}"))?;
    let key = gatehouse_registry::signature::SigningKey::from_encrypted_pem(
        &shown_key,
        &pem,
        &key_password()?,
    )?;
    let runtime = runtime()?;
    let manifest = match reference.digest() {
        Some(digest) => digest.clone(),
        None => runtime.block_on(registry.resolve(&reference))?,
    };
    let layer = key.sign(&reference, &manifest)?;
    runtime.block_on(registry.push_signature(&reference, &manifest, &layer))?;
    let public =
        gatehouse_registry::signature::PublicKey::from_pem("key", key.public_pem().as_bytes())?;
    println!(
        "signed {} with the key {}",
        escape(&reference.pinned(&manifest).to_string()),
        public.fingerprint
    );
    Ok(ExitCode::SUCCESS)
}

fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let reference = reference(&args.reference)?;
    let config = Config::load(&args.config)?;
    let registry = Registry::new(config.registry.access(config.base_dir()))?;
    let policy = config.trust.policy(config.base_dir())?;
    let runtime = runtime()?;
    let manifest = match reference.digest() {
        Some(digest) => digest.clone(),
        None => runtime.block_on(registry.resolve(&reference))?,
    };
    let shown = escape(&reference.pinned(&manifest).to_string()).into_owned();
    match runtime.block_on(trusted_signer(&registry, &policy, &reference, &manifest))? {
        Some(signer) => println!("{shown}: signed by {signer}"),
        None => println!("{shown}: unsigned, which the [trust] policy allows for it"),
    }
    Ok(ExitCode::SUCCESS)
}

fn keygen(args: KeygenArgs) -> anyhow::Result<ExitCode> {
    let password = key_password()?;
    let key = gatehouse_registry::signature::SigningKey::generate()?;
    let private = key.to_encrypted_pem(&password)?;
    let mut private_path = args.output_key_prefix.clone().into_os_string();
    private_path.push(".key");
    let mut public_path = args.output_key_prefix.into_os_string();
    public_path.push(".pub");
    let (private_path, public_path) = (PathBuf::from(private_path), PathBuf::from(public_path));
    for path in [&private_path, &public_path] {
        anyhow::ensure!(
            !path.exists(),
            "{} exists; move it away or choose another --output-key-prefix",
            escape(&path.display().to_string())
        );
    }
    gatehouse_base::private_fs::write_new(&private_path, &[private.as_bytes()], true)
        .with_context(|| {
            format!(
                "cannot write {}",
                escape(&private_path.display().to_string())
            )
        })?;
    std::fs::write(&public_path, key.public_pem()).with_context(|| {
        format!(
            "cannot write {}",
            escape(&public_path.display().to_string())
        )
    })?;
    println!(
        "private key {} (encrypted with COSIGN_PASSWORD), public key {}",
        escape(&private_path.display().to_string()),
        escape(&public_path.display().to_string())
    );
    Ok(ExitCode::SUCCESS)
}
