//! Calls to one member's admin API.

use std::time::Duration;

use admin::ServerStatus;
use admin::roles::ConfigurationView;
use serde::de::DeserializeOwned;

/// Why a call did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The member refused, and changed nothing (HTTP 409): the reason.
    Refused(String),
    /// The member could not be reached, or failed part way: what happened is not known.
    Failed(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Refused(reason) => write!(f, "refused: {reason}"),
            CallError::Failed(reason) => write!(f, "{reason}"),
        }
    }
}

impl std::error::Error for CallError {}

/// One member's admin API.
#[derive(Debug, Clone)]
pub struct Admin {
    pub addr: String,
    pub timeout: Duration,
}

impl Admin {
    pub fn new(addr: &str) -> Admin {
        Admin { addr: addr.to_string(), timeout: Duration::from_secs(5) }
    }

    pub fn with_timeout(addr: &str, timeout: Duration) -> Admin {
        Admin { addr: addr.to_string(), timeout }
    }

    pub fn status(&self) -> Result<ServerStatus, CallError> {
        self.get("/status")
    }

    pub fn configuration(&self) -> Result<ConfigurationView, CallError> {
        self.get("/configuration")
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CallError> {
        self.call("GET", path)
    }

    /// POSTs to a role endpoint.
    pub fn post<T: DeserializeOwned>(&self, path: &str) -> Result<T, CallError> {
        self.call("POST", path)
    }

    /// POSTs a JSON body.
    pub fn post_json<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<T, CallError> {
        let body =
            serde_json::to_vec(body).map_err(|error| CallError::Failed(error.to_string()))?;
        self.call_with("POST", path, &body)
    }

    fn call<T: DeserializeOwned>(&self, method: &str, path: &str) -> Result<T, CallError> {
        self.call_with(method, path, b"")
    }

    fn call_with<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<T, CallError> {
        let (code, body) = admin::http_call_with_body(&self.addr, method, path, body, self.timeout)
            .map_err(|error| CallError::Failed(format!("{error:#}")))?;
        match code {
            200 => serde_json::from_str(&body).map_err(|error| {
                CallError::Failed(format!(
                    "{}{path} answered something unexpected: {error}",
                    self.addr
                ))
            }),
            409 => Err(CallError::Refused(body.trim().to_string())),
            _ => Err(CallError::Failed(format!(
                "{}{path} answered {code}: {}",
                self.addr,
                body.trim()
            ))),
        }
    }
}
