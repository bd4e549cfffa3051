//! `yuebing store stats --watch [INTERVAL]`: a live view of a master for a person at a
//! terminal. Every interval it asks the master for its counts (`stats`) and its rpc server's
//! call counters (`call_stats`), and shows the counts with the rates since the sample before:
//! a table redrawn in place on a terminal, one `key=value` line per sample when stdout is not
//! one. It needs only the master's rpc address (no admin port), and is not a store client: it
//! mounts nothing and sends no pings, so it shows up in no count. A master that stops
//! answering is shown as an error and asked again at the next interval; SIGINT (Ctrl-C) or
//! SIGTERM ends the view with status 0.
//!
//! # Layout
//! - [`rates`]: rates between two snapshots of the call counters (pure).
//! - [`view`]: the table and the plain line (pure).
//! - this module: the loop — which master to ask, when, and where the text goes.

pub mod rates;
pub mod view;

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use yuebing_rpc::{Endpoint, Token};
use yuebing_store::master::{CallStats, ClientId, MasterClient, Stats};
use yuebing_store::{ClientConfig, Error};

use self::rates::Rates;
use self::view::{Failure, Sample};

/// The methods the view itself calls, once each per sample: taken off the counts.
const OWN: [&str; 2] = ["stats", "call_stats"];

/// The shortest deadline of a sample's calls (otherwise the interval): a short interval on a
/// busy master should not read as a master that does not answer.
const MIN_DEADLINE: Duration = Duration::from_secs(2);

/// Shows the view of `cfg`'s master (the first of its masters that answers, or the leader its
/// election names) every `every`, until SIGINT or SIGTERM. Fails only where standard output
/// does (a reader that closed it ends the view quietly).
pub async fn run(cfg: &ClientConfig, every: Duration) -> yuebing_store::Result<()> {
    // Created before the first sample is shown, and polled first in every round (`biased`):
    // its handlers are installed by the time a reader sees a line and may send SIGINT.
    let stop = super::wait_for_signal();
    tokio::pin!(stop);
    let terminal = std::io::stdout().is_terminal();
    let mut masters = Masters::new(cfg);
    let mut samples = Samples::default();
    let mut screen = Screen::new(terminal, every);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let deadline = every.max(MIN_DEADLINE);
    loop {
        let round = async {
            ticks.tick().await;
            let answer = masters.sample(deadline).await;
            screen.show(samples.add(answer))
        };
        let shown = tokio::select! {
            biased;
            stopped = &mut stop => return stopped,
            shown = round => shown,
        };
        match shown {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => {
                return Err(Error::Io {
                    path: "stdout".into(),
                    reason: e.to_string(),
                })
            }
        }
    }
}

/// The masters to ask: a fixed list (the one that answered last first), or the leader an
/// election names.
struct Masters {
    fixed: Vec<MasterClient>,
    current: usize,
    leader: Option<(watch::Receiver<Option<Endpoint>>, Option<MasterClient>)>,
    token: Option<Token>,
}

/// What one master answered: its address, counts and call counters.
type Answer = (String, Stats, CallStats);

impl Masters {
    fn new(cfg: &ClientConfig) -> Masters {
        let token = cfg.token.clone();
        let fixed = cfg
            .masters
            .iter()
            .map(|m| client(m.clone(), token.clone()))
            .collect();
        Masters {
            fixed,
            current: 0,
            leader: cfg.leader.clone().map(|l| (l, None)),
            token,
        }
    }

    /// Asks the master for a sample; on failure the next one of a fixed list, each once.
    async fn sample(&mut self, deadline: Duration) -> Result<Answer, Failure> {
        if let Some((source, held)) = &mut self.leader {
            let named = source.borrow().clone();
            // While the election names none, the configured list (as a store client does).
            if let Some(leader) = named {
                if held.as_ref().is_none_or(|c| *c.endpoint() != leader) {
                    *held = Some(client(leader, self.token.clone()));
                }
                if let Some(c) = held {
                    return ask(c, deadline).await;
                }
            }
        }
        let n = self.fixed.len();
        let mut first = None;
        for i in (0..n).map(|k| (self.current + k) % n) {
            match ask(&self.fixed[i], deadline).await {
                Ok(answer) => {
                    self.current = i;
                    return Ok(answer);
                }
                Err(f) => {
                    first.get_or_insert(f);
                }
            }
        }
        Err(first.unwrap_or_else(|| Failure::of("-".into(), &Error::NotLeader { leader: None })))
    }
}

/// A client of the master at `endpoint` that calls as nobody (the calls it makes name no
/// client).
fn client(endpoint: Endpoint, token: Option<Token>) -> MasterClient {
    let handle = tokio::runtime::Handle::current();
    MasterClient::with_token(endpoint, ClientId(0), token, handle)
}

/// One sample of `master`: `stats`, then `call_stats` (in this order, so that between two
/// samples the master counts exactly one of each of the view's own calls), within `deadline`.
async fn ask(master: &MasterClient, deadline: Duration) -> Result<Answer, Failure> {
    let name = master.endpoint().to_string();
    let m = master.until(Instant::now() + deadline);
    let fail = |e: Error| Failure::of(name.clone(), &e);
    let stats = m.stats().await.map_err(fail)?;
    let calls = m.call_stats().await.map_err(fail)?;
    Ok((name, stats, calls))
}

/// The samples so far: the last call counters answered, to subtract the next ones from.
#[derive(Default)]
struct Samples {
    /// The master that answered last and its counters.
    base: Option<(String, CallStats)>,
    /// Samples asked for since `base` was answered (each made one of each of [`OWN`]).
    asked: u64,
}

impl Samples {
    /// The next answer as the view shows it: with rates where the counters subtract.
    fn add(&mut self, answer: Result<Answer, Failure>) -> Result<Sample, Failure> {
        self.asked += 1;
        let (master, stats, calls) = answer?;
        let own = OWN.map(|m| (m, self.asked));
        let rates = self
            .base
            .as_ref()
            .filter(|(m, _)| *m == master)
            .and_then(|(_, before)| Rates::between(before, &calls, &own));
        self.base = Some((master.clone(), calls));
        self.asked = 0;
        Ok(Sample {
            at: std::time::SystemTime::now(),
            master,
            stats,
            rates,
        })
    }
}

/// Where the view goes: a terminal, redrawn in place, or lines.
struct Screen {
    terminal: bool,
    every: Duration,
    /// On a terminal: the last sample answered, shown under a failure.
    last: Option<Sample>,
}

impl Screen {
    fn new(terminal: bool, every: Duration) -> Screen {
        Screen {
            terminal,
            every,
            last: None,
        }
    }

    fn show(&mut self, sample: Result<Sample, Failure>) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        if !self.terminal {
            writeln!(out, "{}", view::line(sample.as_ref()))?;
            return out.flush();
        }
        let failure = match sample {
            Ok(s) => {
                self.last = Some(s);
                None
            }
            Err(f) => Some(f),
        };
        let text = view::table(self.last.as_ref(), failure.as_ref(), self.every);
        // Home, each line over the old one (cleared to its end), the rest of the screen
        // cleared: no flicker.
        let mut frame = String::from("\x1b[H");
        for l in text.lines() {
            frame.push_str(l);
            frame.push_str("\x1b[K\n");
        }
        frame.push_str("\x1b[J");
        out.write_all(frame.as_bytes())?;
        out.flush()
    }
}
