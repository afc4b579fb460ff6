//! The script's host: the record of host functions the prelude's function receives
//! (`host.call`, `host.agent`, `host.log`, ...) and the helpers it hands back.
//!
//! A spare (`vm/pool.rs`) sets the host up ahead of its script, prelude evaluated and all:
//! the functions act on a [`HostSlot`] that is empty until the script's job binds the
//! script's own outbox, resolvers, nested resolver and companion files into it
//! ([`Host::bind`]), so none of this setup waits on the script. The setup runs only the
//! prelude, trusted code, and a spare's host serves exactly one script, as its runtime does.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use rquickjs::{Ctx, Function, Persistent, Promise};
use serde_json::Value;

use super::prelude::{self, load_prelude};
use super::queue::Outbox;
use super::{NestedResolver, Resolvers, SCRIPT_FILENAME, VmEvent};

/// The prelude's host-only helpers, held by Rust instead of the global object.
pub(super) struct Helpers {
    /// Defines the root scope's DSL globals; called once before the script body.
    pub install: Persistent<Function<'static>>,
    /// `(code, message, recoverable)` to the Error a rejected call's promise carries.
    pub make_error: Persistent<Function<'static>>,
    /// The script's result to its strict JSON text (or undefined).
    pub strict_json: Persistent<Function<'static>>,
    /// Replaces what the script's `budget` reads with a new view (JSON text).
    pub set_budget: Persistent<Function<'static>>,
}

/// What a script's host functions act on, bound when the script starts.
pub(super) struct Bound {
    outbox: Outbox,
    resolvers: Resolvers,
    nested: RefCell<Option<NestedResolver>>,
    files: Arc<BTreeMap<String, String>>,
    next_id: Cell<u64>,
}

impl Bound {
    pub(super) fn new(
        outbox: Outbox,
        resolvers: Resolvers,
        nested: Option<NestedResolver>,
        files: Arc<BTreeMap<String, String>>,
    ) -> Bound {
        Bound {
            outbox,
            resolvers,
            nested: RefCell::new(nested),
            files,
            next_id: Cell::new(0),
        }
    }
}

/// The slot the host functions read their script's [`Bound`] from: empty until the script's
/// job binds it, and emptied again when the script ends.
type HostSlot = Rc<RefCell<Option<Bound>>>;

/// A context's host, set up: the prelude's helpers and the slot its functions read.
pub(super) struct Host {
    pub helpers: Helpers,
    slot: HostSlot,
}

impl Host {
    /// Hands the host functions their script's state.
    pub(super) fn bind(&self, bound: Bound) {
        *self.slot.borrow_mut() = Some(bound);
    }

    /// Takes the script's state back from the host functions (the runtime can then be freed
    /// without them keeping the outbox or the resolvers).
    pub(super) fn unbind(&self) {
        self.slot.borrow_mut().take();
    }
}

/// Loads the prelude (from its bytecode) into `ctx` and evaluates it with the host functions,
/// which live only in a record passed to the prelude, never on the global.
pub(super) fn set_up<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Host> {
    let prelude = load_prelude(ctx)?;
    // QuickJS-ng's `performance` reads the monotonic clock; the prelude puts a refusing stub
    // in its place, and nothing else refers to the real object.
    ctx.globals().remove("performance")?;
    let slot: HostSlot = Rc::default();
    let host = rquickjs::Object::new(ctx.clone())?;
    host.set(
        "call",
        Function::new(ctx.clone(), call_function(slot.clone()))?,
    )?;
    host.set(
        "agent",
        Function::new(ctx.clone(), agent_function(slot.clone()))?,
    )?;
    host.set(
        "log",
        Function::new(
            ctx.clone(),
            event_function(slot.clone(), |level, message| VmEvent::Log {
                level,
                message,
            }),
        )?,
    )?;
    host.set(
        "phase",
        Function::new(
            ctx.clone(),
            event_function(slot.clone(), |scope, title| VmEvent::Phase { scope, title }),
        )?,
    )?;
    host.set(
        "nested",
        Function::new(ctx.clone(), nested_function(slot.clone()))?,
    )?;
    {
        let slot = slot.clone();
        // `undefined` for a path `meta.files` does not declare; the prelude says so.
        host.set(
            "file",
            Function::new(ctx.clone(), move |path: String| {
                slot.borrow()
                    .as_ref()
                    .and_then(|bound| bound.files.get(&path).cloned())
            })?,
        )?;
    }
    host.set(
        "path",
        Function::new(
            ctx.clone(),
            |stack: String, wrapper_line: f64, wrapper_columns: f64| {
                prelude::call_path(&stack, SCRIPT_FILENAME, wrapper_line, wrapper_columns)
            },
        )?,
    )?;
    let helpers: rquickjs::Object = prelude.call((ctx.globals(), host))?;
    let helper = |name: &str| -> rquickjs::Result<Persistent<Function<'static>>> {
        let function: Function = helpers.get(name)?;
        Ok(Persistent::save(ctx, function))
    };
    let helpers = Helpers {
        install: helper("install")?,
        make_error: helper("makeError")?,
        strict_json: helper("strictJson")?,
        set_budget: helper("setBudget")?,
    };
    Ok(Host { helpers, slot })
}

/// The error a host function throws when no script is bound (none runs before one is).
fn unbound(ctx: &Ctx<'_>) -> rquickjs::Error {
    rquickjs::Exception::throw_message(ctx, "the script's host is not bound")
}

/// Registers a call's promise resolvers and tells the driver.
fn call<'js>(
    slot: &HostSlot,
    ctx: &Ctx<'js>,
    kind: String,
    payload: Value,
    weight: usize,
) -> rquickjs::Result<Promise<'js>> {
    let bound = slot.borrow();
    let Some(bound) = bound.as_ref() else {
        return Err(unbound(ctx));
    };
    let (promise, resolve, reject) = ctx.promise()?;
    let call_id = bound.next_id.get() + 1;
    bound.next_id.set(call_id);
    bound.resolvers.borrow_mut().insert(
        call_id,
        (
            Persistent::save(ctx, resolve),
            Persistent::save(ctx, reject),
        ),
    );
    bound.outbox.send(VmEvent::Call {
        call_id,
        kind,
        payload,
        weight,
    });
    Ok(promise)
}

/// `host.call(kind, json)`.
fn call_function(
    slot: HostSlot,
) -> impl for<'js> Fn(Ctx<'js>, String, String) -> rquickjs::Result<Promise<'js>> + 'static {
    move |ctx, kind, payload| {
        let weight = payload.len();
        let payload: Value = serde_json::from_str(&payload).unwrap_or(Value::Null);
        call(&slot, &ctx, kind, payload, weight)
    }
}

/// `host.agent(scope, prompt, path)`.
fn agent_function(
    slot: HostSlot,
) -> impl for<'js> Fn(Ctx<'js>, String, String, Option<String>) -> rquickjs::Result<Promise<'js>> + 'static
{
    move |ctx, scope, prompt, path| {
        let weight = scope.len() + prompt.len() + path.as_ref().map_or(0, String::len);
        call(
            &slot,
            &ctx,
            "agent".to_owned(),
            plain_agent_payload(scope, prompt, path),
            weight,
        )
    }
}

/// `host.log(level, message)` and `host.phase(scope, title)`: an event for the driver.
fn event_function(
    slot: HostSlot,
    event: fn(String, String) -> VmEvent,
) -> impl Fn(String, String) + 'static {
    move |first, second| {
        if let Some(bound) = slot.borrow().as_ref() {
            bound.outbox.send(event(first, second));
        }
    }
}

/// `host.nested(name, args)`: the nested workflow's scope and body, from the run's resolver.
fn nested_function(
    slot: HostSlot,
) -> impl for<'js> Fn(Ctx<'js>, String, String) -> rquickjs::Result<String> + 'static {
    move |ctx, name, _args| {
        let bound = slot.borrow();
        let Some(bound) = bound.as_ref() else {
            return Err(unbound(&ctx));
        };
        let outcome = match bound.nested.borrow_mut().as_mut() {
            Some(resolve) => resolve(&name),
            None => Err("nested workflows are not available here".to_owned()),
        };
        match outcome {
            Ok((scope, body)) => Ok(serde_json::json!({"scope": scope, "body": body}).to_string()),
            Err(message) => Err(rquickjs::Exception::throw_message(
                &ctx,
                &format!("workflow({name:?}): {message}"),
            )),
        }
    }
}

/// The payload `host.call` gets for `agent(prompt)` without options, members in the same
/// order: `{scope, prompt, options: {}, path}`.
pub(super) fn plain_agent_payload(scope: String, prompt: String, path: Option<String>) -> Value {
    let mut payload = serde_json::Map::with_capacity(4);
    payload.insert("scope".to_owned(), Value::String(scope));
    payload.insert("prompt".to_owned(), Value::String(prompt));
    payload.insert("options".to_owned(), Value::Object(serde_json::Map::new()));
    payload.insert("path".to_owned(), path.map_or(Value::Null, Value::String));
    Value::Object(payload)
}
