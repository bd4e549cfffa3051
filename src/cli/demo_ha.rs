//! `yuebing demo --ha`: the demo's story on elected masters, on one machine. etcd, three
//! `yuebing master --etcd` processes and the demo's nodes (`--master` naming all three) on
//! 127.0.0.1; the objects are put and read back by a second client, the leading master is
//! SIGKILLed, the failover is timed (from the kill to the first call and to the first put a new
//! leader takes), every
//! object is read back again, and the killed master is restarted and rejoins as a standby.
//! Prints the demo's summary table, the failover time and a line per master.

use indicatif::ProgressBar;
use yuebing_rpc::Token;

use super::demo::DemoArgs;

/// What a build without the `etcd` feature answers to `what` (`yuebing demo --ha`, …).
pub fn needs_etcd_build(what: &str) -> String {
    format!(
        "{what} needs etcd support, which this yuebing was built without: build it with \
         `cargo build --release --features etcd` (needs protoc: apt-get install \
         protobuf-compiler libprotobuf-dev) and install etcd (apt-get install etcd-server)"
    )
}

/// Runs `yuebing demo --ha`; prints progress on `bar` and returns the summary text, or why it
/// failed.
#[cfg(not(feature = "etcd"))]
pub async fn run(_: DemoArgs, _: Option<Token>, _: ProgressBar) -> Result<String, String> {
    Err(needs_etcd_build("yuebing demo --ha"))
}

/// Runs `yuebing demo --ha`; prints progress on `bar` and returns the summary text, or why it
/// failed. With a `token`, every connection of the demo presents and requires it.
#[cfg(feature = "etcd")]
pub async fn run(args: DemoArgs, token: Option<Token>, bar: ProgressBar) -> Result<String, String> {
    story::run(args, token, bar).await
}

#[cfg(feature = "etcd")]
mod story {
    use std::time::{Duration, Instant};

    use indicatif::ProgressBar;
    use yuebing_rpc::Token;
    use yuebing_store::master::PutConfig;
    use yuebing_store::{Client, ClientConfig, Options};

    use super::super::child::{joined, ChildProcess};
    use super::super::demo::{failures, table, DemoArgs, Objects};
    use super::super::local_ha::{failover, remounted, LocalHa};

    /// Elected masters in the demo.
    const MASTERS: usize = 3;

    pub(super) async fn run(
        args: DemoArgs,
        token: Option<Token>,
        bar: ProgressBar,
    ) -> Result<String, String> {
        let objects = Objects::from_args(&args)?;
        let ttl = Duration::from_millis(args.election_ttl_ms);
        // A leader is elected, or replaced, within about one TTL; these bounds are generous.
        let elected_within = 5 * ttl + Duration::from_secs(10);
        bar.println(format!(
            "starting etcd and {MASTERS} elected masters (election TTL {ttl:?})"
        ));
        let mut ha = LocalHa::start(MASTERS, "demo", ttl, &[], token.clone()).await?;
        let first = ha.leader(elected_within).await?;
        bar.println(format!(
            "etcd on {}; masters on {}; {} leads (epoch {}); starting {} nodes of {} each",
            ha.etcd_endpoint(),
            joined(&ha.endpoints()),
            first.endpoint,
            first.health.epoch,
            args.nodes,
            args.store_size
        ));
        let masters = ha.endpoints();
        let mut nodes = Vec::with_capacity(args.nodes);
        for _ in 0..args.nodes {
            let transport = args.transport.as_deref();
            nodes.push(
                ChildProcess::node_of(&masters, &args.store_size, transport, token.as_ref())
                    .await?,
            );
        }
        let client_cfg = || ClientConfig {
            masters: masters.clone(),
            token: token.clone(),
            ..ClientConfig::default()
        };
        let writer = Client::start(client_cfg())
            .await
            .map_err(|e| e.to_string())?;
        let reader = Client::start(client_cfg())
            .await
            .map_err(|e| e.to_string())?;
        bar.println(objects.describe(args.replicas));
        bar.set_length(3 * args.objects as u64);
        let put_opts = Options::put(PutConfig {
            replica_num: args.replicas,
            ..PutConfig::default()
        });
        let read = Options::default();
        let puts = objects.put_all(&writer, &put_opts, &bar).await;
        let gets = objects
            .check_all("get (second client)", &reader, &read, &bar)
            .await;

        let clients = reader
            .stats(&read)
            .await
            .map_err(|e| e.to_string())?
            .clients;
        ha.kill(first.index);
        let killed = Instant::now();
        bar.println(format!(
            "killed the leading master {} (SIGKILL)",
            first.endpoint
        ));
        let took = failover(&writer, killed, elected_within, "demo/failover").await?;
        let second = ha.leader(elected_within).await?;
        // A replica is readable once its node has mounted its space at the new leader.
        let readable = remounted(&reader, clients, killed, elected_within).await?;
        bar.println(format!(
            "{} leads (epoch {}): it answered {:.2} s and took a put {:.2} s after the kill; \
             every client remounted after {:.2} s",
            second.endpoint,
            second.health.epoch,
            took.serving.as_secs_f64(),
            took.put.as_secs_f64(),
            readable.as_secs_f64()
        ));
        let after = objects
            .check_all("get after the failover", &reader, &read, &bar)
            .await;
        ha.restart(first.index).await?;
        ha.caught_up(elected_within).await?;
        let stats = reader.stats(&read).await.map_err(|e| e.to_string())?;
        bar.finish_and_clear();

        let mut out = format!(
            "yuebing demo --ha: etcd + {MASTERS} elected masters (TTL {} ms) + {} nodes x {} on \
             127.0.0.1; {} objects {}..{} (log-uniform), {} replicas\n",
            args.election_ttl_ms,
            args.nodes,
            args.store_size,
            args.objects,
            args.min,
            args.max,
            args.replicas
        );
        out.push_str(&table(&[&puts, &gets, &after]));
        out.push_str(&format!(
            "failover: leader {} (epoch {}) SIGKILLed; {} (epoch {}) answered {:.2} s and took a \
             put {:.2} s later; all {clients} clients had remounted after {:.2} s (election TTL \
             {:.1} s; a node's replicas are readable, and its space used, once it has mounted \
             again at the new leader, at its next heartbeat)\n",
            first.endpoint,
            first.health.epoch,
            second.endpoint,
            second.health.epoch,
            took.serving.as_secs_f64(),
            took.put.as_secs_f64(),
            readable.as_secs_f64(),
            ttl.as_secs_f64()
        ));
        out.push_str(&format!(
            "store: {} objects, {:.2} of {:.2} GB used, {} evicted; every object {}\n",
            stats.objects,
            stats.bytes_used as f64 / 1e9,
            stats.bytes_capacity as f64 / 1e9,
            stats.evicted,
            if after.errors == 0 {
                "read back byte-exact after the failover"
            } else {
                "NOT read back after the failover"
            },
        ));
        out.push_str("the killed master restarted and rejoined as a standby:\n");
        out.push_str(&ha.describe().await);
        out.push('\n');
        drop(nodes);
        drop(ha);
        if puts.errors + gets.errors + after.errors > 0 || stats.evicted > 0 {
            let why = failures(&[&puts, &gets, &after]);
            return Err(format!("the demo saw failures:\n{out}{why}"));
        }
        Ok(out)
    }
}
