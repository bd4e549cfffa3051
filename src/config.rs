//! Settings: flags > environment (`YUEBING_*`) > TOML file (`--config`) > the default.
//!
//! clap reads flags and environment variables (each flag names its variable); this module adds
//! the file and the defaults, so that each setting's default is written once, where it is
//! resolved.

use std::path::Path;

use serde::de::DeserializeOwned;

/// A parsed `--config` TOML file (empty when none was given).
#[derive(Debug, Default, Clone)]
pub struct ConfigFile {
    table: toml::Table,
}

/// A configuration file could not be read or holds a wrong value.
#[derive(Debug, thiserror::Error)]
#[error("config file {path}: {reason}")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What was wrong.
    pub reason: String,
}

impl ConfigFile {
    /// Reads `path`, or an empty configuration for `None`.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let Some(path) = path else {
            return Ok(ConfigFile::default());
        };
        let fail = |reason: String| ConfigError {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let table = text
            .parse::<toml::Table>()
            .map_err(|e| fail(e.to_string()))?;
        Ok(ConfigFile { table })
    }

    /// Resolves `section.key`: the flag or environment value if given, else the file's, else
    /// `default`.
    pub fn resolve<T: DeserializeOwned>(
        &self,
        section: &str,
        key: &str,
        given: Option<T>,
        default: T,
    ) -> Result<T, ConfigError> {
        if let Some(v) = given {
            return Ok(v);
        }
        match self.table.get(section).and_then(|s| s.get(key)) {
            None => Ok(default),
            Some(v) => v.clone().try_into().map_err(|e| ConfigError {
                path: "--config".into(),
                reason: format!("{section}.{key}: {e}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_is_flag_then_file_then_default() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("y.toml");
        std::fs::write(&path, "[bench]\nrepeat = 5\n").unwrap();
        let f = ConfigFile::load(Some(&path)).unwrap();
        assert_eq!(f.resolve("bench", "repeat", Some(7u32), 3).unwrap(), 7);
        assert_eq!(f.resolve("bench", "repeat", None, 3u32).unwrap(), 5);
        assert_eq!(f.resolve("bench", "other", None, 3u32).unwrap(), 3);
        assert!(f
            .resolve::<String>("bench", "repeat", None, "x".into())
            .is_err());
    }

    #[test]
    fn missing_or_broken_file_is_an_error() {
        assert!(ConfigFile::load(Some(Path::new("/nonexistent/y.toml"))).is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "[bench\n").unwrap();
        assert!(ConfigFile::load(Some(&path)).is_err());
    }
}
