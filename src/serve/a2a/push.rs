//! Push notifications (docs/serve.md, "A2A"): a client registers a webhook for a task (1.0
//! `CreateTaskPushNotificationConfig` or `SendMessage`'s `configuration`, 0.3
//! `tasks/pushNotificationConfig/set` or `message/send`'s `configuration`), and this replica
//! POSTs each change of the task to it: the task first, then its status and artifact
//! updates, as a stream carries them (`stream::follow`), until the task is over (through
//! any checkpoint it waits at and is answered).
//!
//! Only URLs under a prefix the operator allowed (`--a2a-push-allow`) are taken; without one
//! the card offers no push notifications and the methods are refused. Each delivery carries
//! the config's token (`X-A2A-Notification-Token`) and authentication (`Authorization:
//! <scheme> <credentials>`), and is tried [`ATTEMPTS`] times with doubling pauses before it
//! is given up (logged). Configs live in this process's memory: bounded per task and in all,
//! gone with the process, and deleted when their task is over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hyper::Uri;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{A2aError, Version, invalid, shortened};
use crate::model::RunId;
use crate::serve::owners::OwnerKey;
use crate::serve::runs::RunApi;
use crate::serve::view::RunView;
use crate::util::sync::Lock;

/// Tries per delivery, and the first pause (doubled after each failure).
pub(super) const ATTEMPTS: u32 = 5;
const FIRST_PAUSE: Duration = Duration::from_millis(200);
/// Configs per task, and in all.
const PER_TASK: usize = 10;
const IN_ALL: usize = 10_000;
/// Caps on what a config holds.
const MAX_URL: usize = 2048;
const MAX_SECRET: usize = 4096;
const MAX_ID: usize = 128;

/// One registered webhook.
#[derive(Clone)]
pub(super) struct Config {
    id: String,
    url: String,
    token: Option<String>,
    /// `(scheme, credentials)`.
    authentication: Option<(String, String)>,
    /// The version its payloads and answers are spelled in.
    version: Version,
    /// Stops its deliveries when deleted.
    stop: CancellationToken,
}

/// The webhooks of this process and the prefixes they must be under.
pub(crate) struct Pushes {
    allowed: Vec<Uri>,
    configs: Mutex<HashMap<RunId, Vec<Config>>>,
}

impl Pushes {
    /// Allows webhooks under `allowed` (URL prefixes, `http://` or `https://`); none turns
    /// push notifications off. A prefix that is not such a URL is refused, naming it.
    pub(crate) fn new(allowed: &[String]) -> Result<Pushes, String> {
        let allowed = allowed
            .iter()
            .map(|prefix| {
                parse_url(prefix).map_err(|why| {
                    format!("--a2a-push-allow (MHL_SERVE_A2A_PUSH_ALLOW): {prefix:?} {why}")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Pushes {
            allowed,
            configs: Mutex::default(),
        })
    }

    pub(crate) fn enabled(&self) -> bool {
        !self.allowed.is_empty()
    }

    fn check_enabled(&self) -> Result<(), A2aError> {
        if self.enabled() {
            return Ok(());
        }
        Err(A2aError::PushNotSupported(
            "push notifications are off on this server (its operator allows webhook URLs with \
             --a2a-push-allow); stream the task or poll it"
                .to_owned(),
        ))
    }

    /// Registers `config` ([`Pushes::parse`]) for the task of `view` and starts its
    /// deliveries; the stored config as its version spells it.
    pub(super) fn register(
        self: &Arc<Self>,
        api: &Arc<RunApi>,
        owner: &OwnerKey,
        view: RunView,
        config: Config,
        place: &str,
    ) -> Result<Value, A2aError> {
        let version = config.version;
        let task_id = view.run_id.clone();
        {
            let mut configs = self.configs.locked();
            let total: usize = configs.values().map(Vec::len).sum();
            let of_task = configs.entry(task_id.clone()).or_default();
            let replaced = of_task.iter().position(|known| known.id == config.id);
            if replaced.is_none() && (of_task.len() >= PER_TASK || total >= IN_ALL) {
                return Err(invalid(&format!(
                    "{place}: a task holds at most {PER_TASK} push notification configs and \
                     this server {IN_ALL}; delete one first"
                )));
            }
            match replaced {
                Some(index) => std::mem::replace(&mut of_task[index], config.clone())
                    .stop
                    .cancel(),
                None => of_task.push(config.clone()),
            }
        }
        let answer = spelled(&task_id, &config, version);
        tokio::spawn(deliver(
            self.clone(),
            api.clone(),
            owner.clone(),
            view,
            config,
        ));
        Ok(answer)
    }

    /// The config `id` of `task_id` (the first one when `id` is absent).
    pub(super) fn get(
        &self,
        task_id: &RunId,
        id: Option<&str>,
        version: Version,
    ) -> Result<Value, A2aError> {
        self.check_enabled()?;
        let configs = self.configs.locked();
        configs
            .get(task_id)
            .and_then(|of_task| {
                of_task
                    .iter()
                    .find(|config| id.is_none_or(|id| config.id == id))
            })
            .map(|config| spelled(task_id, config, version))
            .ok_or_else(|| {
                invalid("params.id: the task has no push notification config of that id")
            })
    }

    /// Every config of `task_id`.
    pub(super) fn list(&self, task_id: &RunId, version: Version) -> Result<Vec<Value>, A2aError> {
        self.check_enabled()?;
        let configs = self.configs.locked();
        Ok(configs
            .get(task_id)
            .map(|of_task| {
                of_task
                    .iter()
                    .map(|config| spelled(task_id, config, version))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Deletes config `id` of `task_id` and stops its deliveries.
    pub(super) fn delete(&self, task_id: &RunId, id: &str) -> Result<(), A2aError> {
        self.check_enabled()?;
        let mut configs = self.configs.locked();
        let of_task = configs.get_mut(task_id);
        let index = of_task
            .as_ref()
            .and_then(|of_task| of_task.iter().position(|config| config.id == id));
        match (of_task, index) {
            (Some(of_task), Some(index)) => {
                of_task.remove(index).stop.cancel();
                if of_task.is_empty() {
                    configs.remove(task_id);
                }
                Ok(())
            }
            _ => Err(invalid(
                "params.id: the task has no push notification config of that id",
            )),
        }
    }

    /// Forgets a config whose deliveries ended (its task is over).
    fn forget(&self, task_id: &RunId, config: &Config) {
        let mut configs = self.configs.locked();
        if let Some(of_task) = configs.get_mut(task_id) {
            of_task.retain(|known| !(known.id == config.id && known.url == config.url));
            if of_task.is_empty() {
                configs.remove(task_id);
            }
        }
    }

    /// A config object of `version` read and checked (its URL under an allowed prefix), at
    /// `place` in the request; refused when push notifications are off.
    pub(super) fn parse(
        &self,
        value: &Value,
        version: Version,
        place: &str,
    ) -> Result<Config, A2aError> {
        self.check_enabled()?;
        let total: usize = self.configs.locked().values().map(Vec::len).sum();
        if total >= IN_ALL {
            return Err(invalid(&format!(
                "{place}: this server holds {IN_ALL} push notification configs, its most; \
                 delete one first"
            )));
        }
        if !value.is_object() {
            return Err(invalid(&format!("{place}: an object is required")));
        }
        let text = |field: &str, cap: usize| -> Result<Option<String>, A2aError> {
            match value.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) if text.len() <= cap => Ok(Some(text.clone())),
                Some(Value::String(_)) => {
                    Err(invalid(&format!("{place}.{field}: at most {cap} bytes")))
                }
                Some(_) => Err(invalid(&format!("{place}.{field}: a string is required"))),
            }
        };
        let url = text("url", MAX_URL)?
            .ok_or_else(|| invalid(&format!("{place}.url: the webhook URL is required")))?;
        let parsed = parse_url(&url).map_err(|why| invalid(&format!("{place}.url: {why}")))?;
        if !self.allowed.iter().any(|prefix| under(&parsed, prefix)) {
            return Err(invalid(&format!(
                "{place}.url: {:?} is not under a webhook prefix this server's operator allowed",
                shortened(&url)
            )));
        }
        let authentication = match value.get("authentication") {
            None | Some(Value::Null) => None,
            Some(auth) => {
                let scheme = match version {
                    Version::V1 => auth.get("scheme").and_then(Value::as_str),
                    Version::V03 => auth
                        .get("schemes")
                        .and_then(Value::as_array)
                        .and_then(|schemes| schemes.first())
                        .and_then(Value::as_str),
                };
                let credentials = auth.get("credentials").and_then(Value::as_str);
                match (scheme, credentials) {
                    (Some(scheme), Some(credentials))
                        if is_token68(scheme)
                            && credentials.len() <= MAX_SECRET
                            && !credentials.contains(['\r', '\n']) =>
                    {
                        Some((scheme.to_owned(), credentials.to_owned()))
                    }
                    (Some(_), None) | (None, _) => None,
                    _ => {
                        return Err(invalid(&format!(
                            "{place}.authentication: a scheme word and credentials of at most \
                             {MAX_SECRET} bytes on one line are required"
                        )));
                    }
                }
            }
        };
        let token = text("token", MAX_SECRET)?;
        if token
            .as_deref()
            .is_some_and(|token| token.contains(['\r', '\n']))
        {
            return Err(invalid(&format!("{place}.token: one line is required")));
        }
        Ok(Config {
            id: text("id", MAX_ID)?.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            url,
            token,
            authentication,
            version,
            stop: CancellationToken::new(),
        })
    }
}

/// A config as `version` spells it, for task `task_id`.
fn spelled(task_id: &RunId, config: &Config, version: Version) -> Value {
    let mut object = json!({"id": config.id, "url": config.url});
    if let Some(token) = &config.token {
        object["token"] = json!(token);
    }
    match version {
        Version::V1 => {
            if let Some((scheme, credentials)) = &config.authentication {
                object["authentication"] = json!({"scheme": scheme, "credentials": credentials});
            }
            object["taskId"] = json!(task_id);
            object
        }
        Version::V03 => {
            if let Some((scheme, credentials)) = &config.authentication {
                object["authentication"] = json!({"schemes": [scheme], "credentials": credentials});
            }
            json!({"taskId": task_id, "pushNotificationConfig": object})
        }
    }
}

/// Follows the task as a stream does and POSTs each event's result to the webhook.
async fn deliver(
    pushes: Arc<Pushes>,
    api: Arc<RunApi>,
    owner: OwnerKey,
    view: RunView,
    config: Config,
) {
    let task_id = view.run_id.clone();
    let mut events = super::stream::follow(
        api.clone(),
        owner,
        (Value::Null, config.version),
        view,
        false,
        super::stream::Until::Final,
    );
    loop {
        let event = tokio::select! {
            _ = config.stop.cancelled() => return,
            event = events.recv() => event,
        };
        let Some(event) = event else {
            break;
        };
        let Some(payload) = event.get("result") else {
            break;
        };
        if !deliver_one(&config, &task_id, payload).await {
            break;
        }
    }
    pushes.forget(&task_id, &config);
}

/// One event, tried [`ATTEMPTS`] times; whether to go on (not when the config was deleted).
async fn deliver_one(config: &Config, task_id: &RunId, payload: &Value) -> bool {
    let Ok(url) = config.url.parse::<Uri>() else {
        return false;
    };
    let mut headers = Vec::new();
    if let Some(token) = &config.token {
        headers.push(("x-a2a-notification-token", token.clone()));
    }
    if let Some((scheme, credentials)) = &config.authentication {
        headers.push(("authorization", format!("{scheme} {credentials}")));
    }
    let body = Bytes::from(payload.to_string());
    let mut pause = FIRST_PAUSE;
    for attempt in 1..=ATTEMPTS {
        let outcome = super::webhook::post(&url, &headers, body.clone()).await;
        match outcome {
            Ok(status) if (200..300).contains(&status) => return true,
            Ok(status) => {
                tracing::warn!(task = %task_id, attempt, "push notification answered {status}")
            }
            Err(error) => {
                tracing::warn!(task = %task_id, attempt, "push notification failed: {error}")
            }
        }
        if attempt < ATTEMPTS {
            tokio::select! {
                _ = config.stop.cancelled() => return false,
                _ = tokio::time::sleep(pause) => {}
            }
            pause *= 2;
        }
    }
    tracing::warn!(task = %task_id, "push notification given up after {ATTEMPTS} attempts");
    true
}

/// An absolute `http://` or `https://` URL without user information.
fn parse_url(text: &str) -> Result<Uri, String> {
    let uri: Uri = text.parse().map_err(|_| "is not a URL".to_owned())?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err("must be an http:// or https:// URL".to_owned()),
    }
    let authority = uri.authority().ok_or("has no host")?;
    if authority.as_str().contains('@') {
        return Err("must not carry user information".to_owned());
    }
    Ok(uri)
}

/// Whether `url` lies under `prefix`: the same scheme, host and port, and a path that starts
/// with the prefix's path.
fn under(url: &Uri, prefix: &Uri) -> bool {
    let port = |uri: &Uri| {
        uri.port_u16()
            .unwrap_or(if uri.scheme_str() == Some("https") {
                443
            } else {
                80
            })
    };
    url.scheme_str() == prefix.scheme_str()
        && url
            .host()
            .zip(prefix.host())
            .is_some_and(|(a, b)| a.eq_ignore_ascii_case(b))
        && port(url) == port(prefix)
        && url.path().starts_with(prefix.path())
}

/// An HTTP authentication scheme name (a token: letters, digits and `!#$%&'*+-.^_`|~`).
fn is_token68(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_must_lie_under_an_allowed_prefix() {
        let prefix = parse_url("http://127.0.0.1:9000/hooks/").unwrap();
        let yes = |text: &str| under(&parse_url(text).unwrap(), &prefix);
        assert!(yes("http://127.0.0.1:9000/hooks/a"));
        assert!(!yes("http://127.0.0.1:9001/hooks/a"));
        assert!(!yes("https://127.0.0.1:9000/hooks/a"));
        assert!(!yes("http://127.0.0.2:9000/hooks/a"));
        assert!(!yes("http://127.0.0.1:9000/other"));
        assert!(parse_url("ftp://x/").is_err());
        assert!(parse_url("http://user@127.0.0.1/").is_err());
        assert!(parse_url("/relative").is_err());
        assert!(Pushes::new(&["nope".to_owned()]).is_err());
    }
}
