//! Settings every store client command shares: where the masters are, and how to transfer.

use clap::Args;
use yuebing_engine::{EngineConfig, TransportKind};
use yuebing_rpc::{Endpoint, Token};
use yuebing_store::ClientConfig;

use crate::config::{ConfigError, ConfigFile};

/// Flags of commands that act as a store client (`node`, `store …`).
#[derive(Args, Debug, Default, Clone)]
pub struct ClientArgs {
    /// Master addresses, comma-separated, tried in order [default: 127.0.0.1:50051; config:
    /// client.masters].
    #[arg(long = "master", env = "YUEBING_MASTERS", global = true)]
    pub masters: Option<String>,
    /// Force a transport for every transfer: tcp or shm (default: chosen per peer) [config:
    /// client.transport].
    #[arg(long, env = "YUEBING_TRANSPORT", global = true)]
    pub transport: Option<String>,
    /// Address of this client's engine (port 0: any) [default: 127.0.0.1:0; config:
    /// client.bind].
    #[arg(long, env = "YUEBING_CLIENT_BIND", global = true)]
    pub bind: Option<String>,
}

fn bad(key: &str, reason: String) -> ConfigError {
    ConfigError {
        path: format!("client.{key}"),
        reason,
    }
}

impl ClientArgs {
    /// A client configuration (store size 0) from these flags, presenting the cluster `token`.
    pub fn resolve(
        &self,
        file: &ConfigFile,
        token: Option<Token>,
    ) -> Result<ClientConfig, ConfigError> {
        let s = "client";
        let masters: String =
            file.resolve(s, "masters", self.masters.clone(), "127.0.0.1:50051".into())?;
        let masters = masters
            .split(',')
            .map(|m| {
                m.trim()
                    .parse::<Endpoint>()
                    .map_err(|e| bad("masters", format!("{m}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let transport = match file
            .resolve(s, "transport", self.transport.clone(), String::new())?
            .as_str()
        {
            "" | "auto" => None,
            "tcp" => Some(TransportKind::Tcp),
            "shm" => Some(TransportKind::Shm),
            other => {
                return Err(bad(
                    "transport",
                    format!("{other:?} is not tcp, shm or auto"),
                ))
            }
        };
        let bind = file.resolve(s, "bind", self.bind.clone(), "127.0.0.1:0".into())?;
        Ok(ClientConfig {
            masters,
            token,
            engine: EngineConfig {
                bind,
                transport,
                ..EngineConfig::default()
            },
            ..ClientConfig::default()
        })
    }
}
