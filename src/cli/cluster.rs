//! The one cluster setting every command shares: the token that every connection a process
//! makes or accepts presents and requires (master rpc, engine control, tcp data, shm side
//! channel).

use std::path::PathBuf;

use clap::Args;
use yuebing_rpc::Token;

use crate::config::{ConfigError, ConfigFile};

/// Environment variable that carries the token (how `yuebing demo` and the benches hand it to
/// the processes they start: environments are readable only by the same user, unlike argv).
pub const TOKEN_ENV: &str = "YUEBING_TOKEN";
/// Environment variable that names a file holding the token.
pub const TOKEN_FILE_ENV: &str = "YUEBING_TOKEN_FILE";

/// `--token` / `--token-file`, global to every subcommand.
#[derive(Args, Debug, Default, Clone)]
pub struct ClusterArgs {
    /// The cluster token (visible in `ps`; prefer --token-file or YUEBING_TOKEN) [config:
    /// cluster.token].
    #[arg(long, env = TOKEN_ENV, global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding the cluster token (one line) [config: cluster.token_file].
    #[arg(long, env = TOKEN_FILE_ENV, global = true)]
    pub token_file: Option<PathBuf>,
}

fn bad(key: &str, reason: String) -> ConfigError {
    ConfigError {
        path: format!("cluster.{key}"),
        reason,
    }
}

impl ClusterArgs {
    /// The token, if one is set: `--token` or `--token-file` (not both), each from its flag,
    /// its environment variable or the `[cluster]` section of the file. Default: none (any
    /// peer is admitted; fine on one trusted box only).
    pub fn resolve(&self, file: &ConfigFile) -> Result<Option<Token>, ConfigError> {
        let text: String = file.resolve("cluster", "token", self.token.clone(), String::new())?;
        let path: PathBuf = file.resolve(
            "cluster",
            "token_file",
            self.token_file.clone(),
            PathBuf::new(),
        )?;
        match (text.is_empty(), path.as_os_str().is_empty()) {
            (true, true) => Ok(None),
            (false, false) => Err(bad(
                "token",
                "set either a token or a token file, not both".into(),
            )),
            (false, true) => Token::new(text)
                .map(Some)
                .map_err(|e| bad("token", e.to_string())),
            (true, false) => {
                warn_if_others_can_read(&path);
                Token::from_file(&path)
                    .map(Some)
                    .map_err(|e| bad("token_file", e.to_string()))
            }
        }
    }
}

/// Logs a warning when the token file is readable by other users (as ssh does for keys).
fn warn_if_others_can_read(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                "the token file is readable by other users; chmod 600 it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_token_from_flag_file_or_config_never_both() {
        let none = ClusterArgs::default();
        assert_eq!(none.resolve(&ConfigFile::default()).unwrap(), None);
        let flag = ClusterArgs {
            token: Some("abc".into()),
            token_file: None,
        };
        assert_eq!(
            flag.resolve(&ConfigFile::default()).unwrap(),
            Some(Token::new("abc").unwrap())
        );
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, "from-file\n").unwrap();
        let from_file = ClusterArgs {
            token: None,
            token_file: Some(token_file.clone()),
        };
        assert_eq!(
            from_file.resolve(&ConfigFile::default()).unwrap(),
            Some(Token::new("from-file").unwrap())
        );
        let both = ClusterArgs {
            token: Some("abc".into()),
            token_file: Some(token_file),
        };
        assert!(both.resolve(&ConfigFile::default()).is_err());
        let cfg = dir.path().join("y.toml");
        std::fs::write(&cfg, "[cluster]\ntoken = \"in-config\"\n").unwrap();
        let file = ConfigFile::load(Some(&cfg)).unwrap();
        assert_eq!(
            none.resolve(&file).unwrap(),
            Some(Token::new("in-config").unwrap())
        );
        let bad = ClusterArgs {
            token: Some("has space".into()),
            token_file: None,
        };
        let e = bad.resolve(&ConfigFile::default()).unwrap_err();
        assert!(!e.to_string().contains("has space"), "never repeated: {e}");
    }
}
