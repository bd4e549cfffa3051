//! The elected masters under stress: standby lag under a put load, and the failover time over
//! repeated SIGKILLs of the leader.

use std::time::{Duration, Instant};

use super::setups::{elected_within, put_load, Setups};
use super::HaBenchConfig;
use crate::bench::harness::median_spread;
use crate::bench::report::Row;
use crate::bench::transfer::size_label;
use crate::cli::local_ha::failover;

/// How often the standbys' positions are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// Each standby's lag behind the leader (the leader's durable sequence minus the standby's
/// applied one, in records) while `cfg.inflight` puts of `size` bytes run for `cfg.lag`;
/// with the leader's put and record rates over the same time, and the lag in ms estimated
/// from that record rate.
pub(super) async fn standby_lag(
    s: &Setups,
    cfg: &HaBenchConfig,
    size: usize,
) -> Result<Vec<Row>, String> {
    s.ha.caught_up(elected_within(cfg)).await?;
    let leader = s.ha.leader(elected_within(cfg)).await?;
    let n = s.ha.endpoints().len();
    let load = put_load(
        s.ha_client(),
        size,
        cfg.inflight,
        Duration::ZERO,
        cfg.lag,
        "lag",
    );
    let sampler = async {
        let start = Instant::now();
        let mut lags: Vec<Vec<f64>> = vec![Vec::new(); n];
        let mut durable = (leader.health.durable_seq, leader.health.durable_seq);
        while start.elapsed() < cfg.lag {
            let healths = s.ha.healths().await;
            let lead = healths[leader.index]
                .as_ref()
                .filter(|h| h.role == "leader")
                .ok_or("the leader stopped leading while the standby lag was measured")?;
            durable.1 = lead.durable_seq;
            for (i, h) in healths.iter().enumerate() {
                if let Some(h) = h.as_ref().filter(|_| i != leader.index) {
                    lags[i].push(lead.durable_seq.saturating_sub(h.last_seq) as f64);
                }
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
        let per_sec = (durable.1 - durable.0) as f64 / start.elapsed().as_secs_f64();
        Ok::<_, String>((lags, per_sec))
    };
    let (load, sampled) = tokio::join!(load, sampler);
    let (load, (lags, records_per_sec)) = (load?, sampled?);
    let case = format!(
        "standby lag, put {} x{} in flight",
        size_label(size),
        cfg.inflight
    );
    let mut rows = vec![
        Row::new(&case, "leader", "ops/s", (load.ops_per_sec(), 0.0)),
        Row::new(&case, "leader", "records/s", (records_per_sec, 0.0)),
    ];
    let endpoints = s.ha.endpoints();
    for (i, lag) in lags.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
        let variant = format!("standby {}", endpoints[i]);
        let (median, spread) = median_spread(lag);
        let max = lag.iter().copied().fold(0.0, f64::max);
        rows.push(Row::new(&case, &variant, "p50_records", (median, spread)));
        rows.push(Row::new(&case, &variant, "max_records", (max, 0.0)));
        if records_per_sec > 0.0 {
            let ms = |records: f64| (records / records_per_sec * 1000.0, 0.0);
            rows.push(Row::new(&case, &variant, "p50_ms_est", ms(median)));
            rows.push(Row::new(&case, &variant, "max_ms_est", ms(max)));
        }
    }
    Ok(rows)
}

/// `cfg.kills` times: waits until every standby has caught up, SIGKILLs the leader, times
/// the first call a new leader answers (`serving_ms`) and the first put it takes (`put_ms`:
/// also waits for the node to mount its space there, at its next heartbeat), and restarts the
/// killed master (a standby now).
pub(super) async fn kills(
    mut s: Setups,
    cfg: &HaBenchConfig,
    tick: &mut impl FnMut(&str),
) -> Result<Vec<Row>, String> {
    let within = elected_within(cfg);
    let mut times = Vec::with_capacity(cfg.kills);
    for k in 0..cfg.kills {
        s.ha.caught_up(within).await?;
        let leader = s.ha.leader(within).await?;
        s.ha.kill(leader.index);
        let killed = Instant::now();
        times.push(failover(s.ha_client(), killed, within, &format!("failover/{k}")).await?);
        s.ha.restart(leader.index).await?;
        tick("failover");
    }
    let case = format!(
        "failover: SIGKILL of the leader, TTL {} ms",
        cfg.ttl.as_millis()
    );
    // Each kill's two times in ms: (serving_ms, put_ms).
    let ms: Vec<[f64; 2]> = times
        .iter()
        .map(|f| [f.serving, f.put].map(|d| d.as_secs_f64() * 1000.0))
        .collect();
    let metrics = ["serving_ms", "put_ms"];
    let mut rows = Vec::new();
    for (k, kill) in ms.iter().enumerate() {
        for (metric, value) in metrics.iter().zip(kill) {
            let variant = format!("kill {}", k + 1);
            rows.push(Row::new(&case, &variant, metric, (*value, 0.0)));
        }
    }
    if !ms.is_empty() {
        let variant = format!("median of {}", ms.len());
        for (i, metric) in metrics.iter().enumerate() {
            let values: Vec<f64> = ms.iter().map(|kill| kill[i]).collect();
            rows.push(Row::new(&case, &variant, metric, median_spread(&values)));
        }
    }
    Ok(rows)
}
