//! How to reach etcd and where yuebing's keys live there.
//!
//! Every key yuebing writes lies under `<prefix>/<cluster>/` ([`Keys`]): several yuebing
//! clusters can share one etcd, each under its own cluster name, and never see each other's
//! keys.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tokio::runtime::Handle;

use crate::error::{Error, Result};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "/yuebing";
/// The default cluster name.
pub const DEFAULT_CLUSTER: &str = "default";

/// The shortest HTTP/2 keep-alive interval: etcd's default `--grpc-keepalive-min-time`.
/// Measured here: with pings every second, an idle watch was broken by etcd's GOAWAY within
/// 15 s; with 5 or 10 s it was not.
pub const MIN_KEEP_ALIVE: Duration = Duration::from_secs(5);

/// A user name and password for etcd's authentication. `Debug` does not print the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The etcd user.
    pub user: String,
    /// Its password.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// PEM files for TLS to etcd (`https://` endpoints); needs the crate feature `tls`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA that signed etcd's certificate (default: none; the server is then checked
    /// against no root and the handshake fails, so set it).
    pub ca: Option<PathBuf>,
    /// The client certificate, where etcd asks for one (with `key`).
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (with `cert`).
    pub key: Option<PathBuf>,
    /// The name to check etcd's certificate against (default: the endpoint's host).
    pub domain: Option<String>,
}

/// Settings of a connection to etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// The members' client endpoints, `host:port` (or `http://…`, `https://…`), at least one.
    pub endpoints: Vec<String>,
    /// Authentication, if etcd has it enabled.
    pub credentials: Option<Credentials>,
    /// TLS files, if etcd serves TLS.
    pub tls: Option<TlsFiles>,
    /// Where yuebing's keys start (default [`DEFAULT_PREFIX`]); begins with `/`.
    pub prefix: String,
    /// The yuebing cluster (default [`DEFAULT_CLUSTER`]); no `/`.
    pub cluster: String,
    /// Deadline of a TCP connect to one member (default 5 s).
    pub connect_timeout: Duration,
    /// Deadline of each unary request yuebing makes (default 5 s). Streams (watches,
    /// keep-alives) have none; the client sets no channel-wide timeout, so that a later
    /// campaign for leadership can wait as long as it needs.
    pub request_timeout: Duration,
    /// HTTP/2 keep-alive interval and timeout while a stream (watch, lease keep-alive) is
    /// open (default 10 s): how soon a silent connection is found dead. Keep it at or above
    /// etcd's `--grpc-keepalive-min-time` (default 5 s): etcd answers pings that come more
    /// often with GOAWAY, which breaks every stream on the connection.
    pub keep_alive: Duration,
}

impl EtcdConfig {
    /// Settings with the defaults and the endpoints of `endpoints` (`"h:p,h:p"`).
    pub fn new(endpoints: &str) -> Result<Self> {
        Ok(EtcdConfig {
            endpoints: parse_endpoints(endpoints)?,
            credentials: None,
            tls: None,
            prefix: DEFAULT_PREFIX.to_string(),
            cluster: DEFAULT_CLUSTER.to_string(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            keep_alive: Duration::from_secs(10),
        })
    }

    /// The same settings for the yuebing cluster `cluster`.
    pub fn with_cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = cluster.into();
        self
    }

    /// The same settings with keys under `prefix`.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Checks the settings without contacting anything.
    pub fn validate(&self) -> Result<()> {
        if self.endpoints.is_empty() {
            return Err(Error::config("no etcd endpoints"));
        }
        for e in &self.endpoints {
            check_endpoint(e)?;
        }
        if self.keep_alive < MIN_KEEP_ALIVE {
            return Err(Error::config(format!(
                "keep_alive {:?} is below {MIN_KEEP_ALIVE:?}: etcd would answer the pings with \
                 GOAWAY (--grpc-keepalive-min-time), breaking watches",
                self.keep_alive
            )));
        }
        self.keys().map(|_| ())
    }

    /// Where this cluster's keys live.
    pub fn keys(&self) -> Result<Keys> {
        let prefix = self.prefix.trim_end_matches('/');
        if !self.prefix.starts_with('/') {
            return Err(Error::config(format!(
                "key prefix {:?} must begin with '/'",
                self.prefix
            )));
        }
        if self.cluster.is_empty() || self.cluster.contains('/') {
            return Err(Error::config(format!(
                "cluster name {:?} must be non-empty and without '/'",
                self.cluster
            )));
        }
        Ok(Keys {
            root: format!("{prefix}/{}", self.cluster),
        })
    }

    /// etcd-client's options for these settings (TLS files are read here).
    pub fn connect_options(&self) -> Result<ConnectOptions> {
        // No pings on an idle connection: etcd counts them against the client (see
        // `keep_alive`). Requests need a leader, so that a member cut off from the others
        // fails them (and cancels watches) instead of serving stale data.
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.connect_timeout)
            .with_keep_alive(self.keep_alive, self.keep_alive)
            .with_keep_alive_while_idle(false)
            .with_require_leader(true);
        if let Some(c) = &self.credentials {
            options = options.with_user(c.user.clone(), c.password.clone());
        }
        if let Some(tls) = &self.tls {
            options = with_tls(options, tls)?;
        }
        Ok(options)
    }

    /// A client for these settings whose connections and background tasks live on `handle`'s
    /// runtime. Connections are made lazily: this fails only on bad settings or, with
    /// credentials, when authenticating fails (within `connect_timeout + request_timeout`).
    pub async fn connect_on(&self, handle: &Handle) -> Result<Client> {
        self.validate()?;
        let options = self.connect_options()?;
        let endpoints = self.endpoints.clone();
        let deadline = self.connect_timeout + self.request_timeout;
        let connect = handle.spawn(async move {
            tokio::time::timeout(deadline, Client::connect(endpoints, Some(options))).await
        });
        match connect.await {
            Ok(Ok(client)) => Ok(client?),
            Ok(Err(_)) => Err(Error::Timeout {
                op: "connect".into(),
                after: deadline,
            }),
            Err(e) => Err(Error::Client {
                reason: format!("the connect task ended: {e}"),
            }),
        }
    }
}

#[cfg(feature = "tls")]
fn with_tls(options: ConnectOptions, files: &TlsFiles) -> Result<ConnectOptions> {
    use etcd_client::{Certificate, Identity, TlsOptions};
    let read = |path: &PathBuf| {
        std::fs::read(path)
            .map_err(|e| Error::config(format!("cannot read {}: {e}", path.display())))
    };
    let mut tls = TlsOptions::new();
    if let Some(ca) = &files.ca {
        tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        (None, None) => {}
        _ => {
            return Err(Error::config(
                "a TLS client certificate needs both cert and key",
            ))
        }
    }
    if let Some(domain) = &files.domain {
        tls = tls.domain_name(domain.clone());
    }
    Ok(options.with_tls(tls))
}

#[cfg(not(feature = "tls"))]
fn with_tls(_: ConnectOptions, _: &TlsFiles) -> Result<ConnectOptions> {
    Err(Error::config(
        "TLS to etcd needs yuebing-etcd built with its feature `tls`",
    ))
}

/// Parses `"h:p,h:p"` (spaces around items allowed; `http://` or `https://` kept).
pub fn parse_endpoints(list: &str) -> Result<Vec<String>> {
    let endpoints: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect();
    if endpoints.is_empty() {
        return Err(Error::config(format!("no etcd endpoints in {list:?}")));
    }
    for e in &endpoints {
        check_endpoint(e)?;
    }
    Ok(endpoints)
}

/// Checks one endpoint: an optional scheme, a host, a non-zero port, nothing else.
fn check_endpoint(endpoint: &str) -> Result<()> {
    let bad = |why: &str| Error::config(format!("etcd endpoint {endpoint:?}: {why}"));
    let rest = match endpoint.split_once("://") {
        Some(("http", rest)) => rest,
        Some(("https", rest)) => {
            if cfg!(not(feature = "tls")) {
                return Err(bad("https needs yuebing-etcd built with its feature `tls`"));
            }
            rest
        }
        Some(_) => return Err(bad("the scheme must be http or https")),
        None => endpoint,
    };
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| bad("expected host:port"))?;
    if host.is_empty() || host.contains('/') || host.contains(char::is_whitespace) {
        return Err(bad("bad host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(()),
        _ => Err(bad("the port must be 1 … 65535")),
    }
}

/// The keys of one yuebing cluster: `<prefix>/<cluster>/…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    root: String,
}

impl Keys {
    /// `<prefix>/<cluster>`, under which every key of the cluster lies.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// `<prefix>/<cluster>/segments/`, the prefix of every segment descriptor.
    pub fn segments(&self) -> String {
        format!("{}/segments/", self.root)
    }

    /// `<prefix>/<cluster>/segments/<name>`, where the descriptor of segment `name` lives.
    pub fn segment(&self, name: &str) -> String {
        format!("{}/segments/{name}", self.root)
    }

    /// `<prefix>/<cluster>/master`: the prefix handed to `yuebing_store::master::ha::LogGroup`,
    /// so the master's operation log lies at `<prefix>/<cluster>/master/log/<first seq>`.
    pub fn master(&self) -> String {
        format!("{}/master", self.root)
    }

    /// `<prefix>/<cluster>/master/election`: the election's name; each candidate's key is
    /// `<election>/<lease id, hex>` and the oldest one leads.
    pub fn election(&self) -> String {
        format!("{}/master/election", self.root)
    }

    /// `<prefix>/<cluster>/master/standbys/`: the prefix under which each standby publishes
    /// the last log sequence number it applied (on its lease), so the leader truncates only
    /// what every standby has.
    pub fn standbys(&self) -> String {
        format!("{}/master/standbys/", self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_lists_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_endpoints(" 127.0.0.1:2379 ,localhost:1,http://[::1]:3,").unwrap(),
            ["127.0.0.1:2379", "localhost:1", "http://[::1]:3"]
        );
        for bad in [
            "",
            " , ",
            "127.0.0.1",
            "h:0",
            "h:70000",
            ":1",
            "ftp://h:1",
            "h:p",
        ] {
            let err = parse_endpoints(bad).unwrap_err();
            assert_eq!(err.code(), -5001, "{bad:?}: {err}");
        }
    }

    #[test]
    fn keys_lie_under_prefix_and_cluster() {
        let c = EtcdConfig::new("h:1").unwrap().with_cluster("c1");
        let keys = c.keys().unwrap();
        assert_eq!(
            keys.segment("127.0.0.1:7"),
            "/yuebing/c1/segments/127.0.0.1:7"
        );
        assert_eq!(keys.segments(), "/yuebing/c1/segments/");
        let k = c.clone().with_prefix("/a/b/").keys().unwrap();
        assert_eq!(k.root(), "/a/b/c1");
        let mut fast_pings = c.clone();
        fast_pings.keep_alive = Duration::from_secs(1);
        for bad in [
            fast_pings,
            c.clone().with_prefix("nope"),
            c.clone().with_cluster(""),
            c.clone().with_cluster("a/b"),
        ] {
            assert_eq!(bad.validate().unwrap_err().code(), -5001);
        }
    }

    #[test]
    fn credentials_are_not_printed() {
        let c = Credentials {
            user: "u".into(),
            password: "secret".into(),
        };
        assert!(!format!("{c:?}").contains("secret"));
    }

    #[test]
    fn tls_files_are_checked() {
        let mut c = EtcdConfig::new("h:1").unwrap();
        c.tls = Some(TlsFiles {
            ca: Some("/nonexistent/ca.pem".into()),
            ..TlsFiles::default()
        });
        assert_eq!(c.connect_options().unwrap_err().code(), -5001);
    }
}
