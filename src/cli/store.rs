//! `yuebing store put|get|exist|remove|ls|stats|copy|move|task`: operator commands against a
//! running master, like redis-cli. Each runs a pure client (no store space); `stats --watch`
//! only master calls (see [`watch`](super::watch)).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use yuebing_rpc::{Endpoint, Token};
use yuebing_store::master::{ClientId, MasterClient, PutConfig, TaskId, TaskInfo, TaskState};
use yuebing_store::{Client, ClientConfig, Options};

/// One operator command. Its arguments are checked as they are parsed, before the command
/// starts a client: an empty KEY or `--replicas 0` is a usage error naming it.
#[derive(Subcommand, Debug)]
pub enum StoreCmd {
    /// Store FILE (or standard input for `-`) under KEY.
    Put {
        /// The key.
        #[arg(value_parser = key)]
        key: String,
        /// A file, or `-` for standard input.
        file: String,
        /// Replicas on distinct nodes (at least 1).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        replicas: u32,
    },
    /// Write KEY's value to FILE (or standard output).
    Get {
        /// The key.
        #[arg(value_parser = key)]
        key: String,
        /// Where to write; standard output if absent.
        file: Option<PathBuf>,
    },
    /// Print whether KEY exists.
    Exist {
        /// The key.
        #[arg(value_parser = key)]
        key: String,
    },
    /// Remove KEY.
    Remove {
        /// The key.
        #[arg(value_parser = key)]
        key: String,
        /// Even while a reader holds a lease.
        #[arg(long)]
        force: bool,
    },
    /// List keys starting with PREFIX: key, size, replicas.
    Ls {
        /// The prefix (all keys if absent).
        #[arg(default_value = "")]
        prefix: String,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: u64,
    },
    /// Print the master's counts; with --watch, a live view until Ctrl-C.
    Stats {
        /// Show the counts with calls, errors and p99 latency per second, again every
        /// INTERVAL (seconds, 2 or 1.5s, or milliseconds, 500ms; default 1s), until Ctrl-C:
        /// a table redrawn in place on a terminal, one key=value line per sample otherwise.
        #[arg(
            long,
            value_name = "INTERVAL",
            num_args = 0..=1,
            default_missing_value = "1s",
            value_parser = super::duration::duration
        )]
        watch: Option<Duration>,
    },
    /// Add a replica of KEY on each TARGET node, in the background; prints the task's id
    /// (follow it with `store task ID`, or `--wait` for its end).
    Copy {
        /// The key.
        #[arg(value_parser = key)]
        key: String,
        /// Nodes (engine segment names, as `store get` sources show them).
        #[arg(required = true)]
        targets: Vec<String>,
        /// Wait until the task ends, and fail unless it succeeded.
        #[arg(long)]
        wait: bool,
    },
    /// Move KEY's replica on node SOURCE to node TARGET, in the background; prints the task's
    /// id.
    Move {
        /// The key.
        #[arg(value_parser = key)]
        key: String,
        /// The node holding the replica now.
        source: String,
        /// The node it goes to.
        target: String,
        /// Wait until the task ends, and fail unless it succeeded.
        #[arg(long)]
        wait: bool,
    },
    /// Print a copy or move task: id, kind, state, key, and why it failed.
    Task {
        /// The task's id, HIGH-LOW as `store copy` prints it.
        id: TaskId,
    },
}

/// A KEY argument, checked as the client and the master check it (refused before connecting).
fn key(text: &str) -> Result<String, String> {
    yuebing_store::args::key(text)
        .map(|()| text.to_string())
        .map_err(|e| e.to_string())
}

fn io(path: &str, e: std::io::Error) -> yuebing_store::Error {
    yuebing_store::Error::Io {
        path: path.into(),
        reason: e.to_string(),
    }
}

/// Runs one command; what it prints goes to standard output.
pub async fn run(mut cfg: ClientConfig, cmd: StoreCmd) -> yuebing_store::Result<()> {
    cfg.staging_size = 0;
    if let StoreCmd::Stats { watch: Some(every) } = cmd {
        return super::watch::run(&cfg, every).await;
    }
    let (masters, token, leader) = (cfg.masters.clone(), cfg.token.clone(), cfg.leader.clone());
    let client = Client::start(cfg).await?;
    let result = execute(&client, cmd, masters, token, leader).await;
    // Where descriptors are stored (`--metadata etcd://…`), the command's engine takes its
    // own out before the process ends, rather than leaving it to expire.
    if let Err(e) = client.engine().withdraw().await {
        tracing::debug!(error = %e, "the command's descriptor was not withdrawn; it will expire");
    }
    result
}

/// The command itself, on a started client.
async fn execute(
    client: &Client,
    cmd: StoreCmd,
    masters: Vec<Endpoint>,
    token: Option<Token>,
    leader: Option<tokio::sync::watch::Receiver<Option<Endpoint>>>,
) -> yuebing_store::Result<()> {
    let opts = Options::default();
    let mut out = std::io::stdout();
    match cmd {
        StoreCmd::Put {
            key,
            file,
            replicas,
        } => {
            let mut value = Vec::new();
            match file.as_str() {
                "-" => std::io::stdin().read_to_end(&mut value).map(|_| ()),
                f => std::fs::read(f).map(|v| value = v),
            }
            .map_err(|e| io(&file, e))?;
            let put = Options::put(PutConfig {
                replica_num: replicas,
                ..PutConfig::default()
            });
            client.put(&key, &value, &put).await?;
            writeln!(out, "stored {key} ({} bytes)", value.len()).map_err(|e| io("stdout", e))?;
        }
        StoreCmd::Get { key, file } => {
            let value = client.get(&key, &opts).await?;
            match file {
                Some(f) => {
                    std::fs::write(&f, &value).map_err(|e| io(&f.display().to_string(), e))?
                }
                None => out.write_all(&value).map_err(|e| io("stdout", e))?,
            }
        }
        StoreCmd::Exist { key } => {
            let yes = client.exist(&key, &opts).await?;
            writeln!(out, "{yes}").map_err(|e| io("stdout", e))?;
        }
        StoreCmd::Remove { key, force } => {
            client.remove(&key, force, &opts).await?;
            writeln!(out, "removed {key}").map_err(|e| io("stdout", e))?;
        }
        StoreCmd::Ls { prefix, limit } => {
            for o in client.list(&prefix, limit, &opts).await? {
                writeln!(out, "{}\t{}\t{}", o.key, o.size, o.replicas)
                    .map_err(|e| io("stdout", e))?;
            }
        }
        StoreCmd::Copy { key, targets, wait } => {
            let id = client.create_copy_task(&key, &targets, &opts).await?;
            follow(client, id, wait, &mut out).await?;
        }
        StoreCmd::Move {
            key,
            source,
            target,
            wait,
        } => {
            let id = client
                .create_move_task(&key, &source, &target, &opts)
                .await?;
            follow(client, id, wait, &mut out).await?;
        }
        StoreCmd::Task { id } => {
            let t = client.query_task(id, &opts).await?;
            write_task(&mut out, &t)?;
        }
        StoreCmd::Stats { .. } => {
            let s = client.stats(&opts).await?;
            let text = format!(
                "objects\t{}\npending_writes\t{}\nbytes_used\t{}\nbytes_capacity\t{}\nnodes\t{}\nmounts\t{}\nclients\t{}\nevicted\t{}\nfragmentation\t{:.4}\nlast_seq\t{}\n",
                s.objects, s.pending_writes, s.bytes_used, s.bytes_capacity, s.nodes, s.mounts,
                s.clients, s.evicted, s.fragmentation, s.last_seq
            );
            out.write_all(text.as_bytes())
                .map_err(|e| io("stdout", e))?;
            // Following an election (etcd://): the leader it names now.
            let masters = match leader {
                Some(leader) if masters.is_empty() => leader.borrow().iter().cloned().collect(),
                _ => masters,
            };
            write_masters(&mut out, &masters, token).await?;
        }
    }
    Ok(())
}

/// Prints a new task's id; with `wait`, polls it until it ends, prints it, and answers its
/// failure as an error.
async fn follow(
    client: &Client,
    id: TaskId,
    wait: bool,
    out: &mut impl Write,
) -> yuebing_store::Result<()> {
    writeln!(out, "{id}").map_err(|e| io("stdout", e))?;
    if !wait {
        return Ok(());
    }
    let opts = Options::default();
    let t = loop {
        let t = client.query_task(id, &opts).await?;
        if t.state.is_finished() {
            break t;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    write_task(out, &t)?;
    match t.state {
        TaskState::Success => Ok(()),
        _ => Err(yuebing_store::Error::InvalidWrite {
            key: t.key,
            reason: format!("task {id} failed: {}", t.message),
        }),
    }
}

/// A task as one tab-separated line: id, kind, state, key, message.
fn write_task(out: &mut impl Write, t: &TaskInfo) -> yuebing_store::Result<()> {
    writeln!(
        out,
        "{}\t{}\t{}\t{}\t{}",
        t.id,
        t.kind.name(),
        t.state.name(),
        t.key,
        t.message
    )
    .map_err(|e| io("stdout", e))
}

/// One line per configured master: its role, epoch, applied and durable positions, and how
/// far its state is behind the most advanced durable position among them (a standby's lag).
async fn write_masters(
    out: &mut impl Write,
    masters: &[Endpoint],
    token: Option<Token>,
) -> yuebing_store::Result<()> {
    let mut healths = Vec::new();
    for m in masters {
        let handle = tokio::runtime::Handle::current();
        let client = MasterClient::with_token(m.clone(), ClientId(0), token.clone(), handle);
        healths.push((m, client.health().await));
    }
    let newest = healths
        .iter()
        .filter_map(|(_, h)| h.as_ref().ok().map(|h| h.durable_seq))
        .max()
        .unwrap_or(0);
    for (m, health) in healths {
        let line = match health {
            Ok(h) => format!(
                "master\t{m}\t{}\tepoch {}\tapplied {}\tdurable {}\tlag {}\n",
                h.role,
                h.epoch,
                h.last_seq,
                h.durable_seq,
                newest.saturating_sub(h.last_seq)
            ),
            Err(e) => format!("master\t{m}\tunreachable\t{e}\n"),
        };
        out.write_all(line.as_bytes())
            .map_err(|e| io("stdout", e))?;
    }
    Ok(())
}
