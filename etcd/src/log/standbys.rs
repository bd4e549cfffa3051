//! What each standby has applied: `<prefix>/<cluster>/master/standbys/<id>` holds the last
//! sequence number standby `id` applied, in decimal, on the standby's lease.

use etcd_client::{GetOptions, PutOptions};

use super::EtcdLog;
use crate::error::{Error, Result};

pub(super) async fn publish(log: &EtcdLog, id: &str, seq: u64, lease: i64) -> Result<()> {
    if id.is_empty() || id.contains('/') {
        return Err(Error::config(format!(
            "standby id {id:?} must be non-empty and without '/'"
        )));
    }
    let key = format!("{}{id}", log.keys.standbys());
    let mut kv = log.client.kv_client();
    let options = PutOptions::new().with_lease(lease);
    let put = kv.put(key, seq.to_string(), Some(options));
    match tokio::time::timeout(log.timeout, put).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if Error::is_lease_not_found(&e) => Err(Error::LeaseNotFound { lease }),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(Error::Timeout {
            op: "publish applied".into(),
            after: log.timeout,
        }),
    }
}

/// The lowest published position, and the revision it was read at.
pub(super) async fn lowest(log: &EtcdLog) -> Result<(Option<u64>, super::Revision)> {
    let (positions, revision) = positions(log).await?;
    Ok((positions.iter().map(|(_, seq)| *seq).min(), revision))
}

/// Each standby's id and published position, and the revision they were read at.
pub(super) async fn positions(log: &EtcdLog) -> Result<(Vec<(String, u64)>, super::Revision)> {
    let mut kv = log.client.kv_client();
    let prefix = log.keys.standbys();
    let resp = log
        .call(
            "standbys",
            kv.get(prefix.as_str(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
    let mut positions = Vec::with_capacity(resp.kvs().len());
    for found in resp.kvs() {
        // A value that is no position holds nothing back (its standby, if any, bootstraps
        // should the log be truncated past it): one bad key must not stop truncation.
        let seq = match parse_applied(found.key(), found.value()) {
            Ok(seq) => seq,
            Err(e) => {
                tracing::warn!(error = %e, "ignoring a standby's published position");
                continue;
            }
        };
        let Some(id) = found.key().strip_prefix(prefix.as_bytes()) else {
            let key = String::from_utf8_lossy(found.key());
            tracing::warn!(%key, "ignoring a key outside the standbys' prefix");
            continue;
        };
        positions.push((String::from_utf8_lossy(id).into_owned(), seq));
    }
    Ok((positions, super::revision_of(&resp, "standbys")?))
}

/// A published sequence number: ASCII decimal digits only.
pub(super) fn parse_applied(key: &[u8], value: &[u8]) -> Result<u64> {
    let bad = |reason: &str| Error::BadValue {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: reason.to_string(),
    };
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Err(bad("an applied sequence number must be decimal digits"));
    }
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad("an applied sequence number out of range"))
}
