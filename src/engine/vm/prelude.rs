//! The prelude, parsed once per process: the first VM compiles `prelude.js` as a module and
//! keeps its bytecode, and every later VM loads that bytecode instead of parsing the 19 KiB
//! source again (most of a 0-agent admission's CPU went to parsing it twice).

use std::sync::OnceLock;

use rquickjs::{Ctx, Function, Module, WriteOptions};

pub(super) const PRELUDE: &str = include_str!("../prelude.js");
/// The module name prelude frames carry in stack traces, as when it was evaluated as a script.
const PRELUDE_NAME: &str = "prelude.js";
/// The prelude compiled by the first VM of this process, loaded by every later one. QuickJS
/// copies what it reads (`JS_READ_OBJ_ROM_DATA` is 0 in QuickJS-ng), so VMs never borrow it.
pub(super) static PRELUDE_BYTECODE: OnceLock<Vec<u8>> = OnceLock::new();

/// The prelude module's source: `prelude.js` unchanged (its function is strict inside, so the
/// module's strict top level changes nothing) with the prefix on its first line, a comment, so
/// lines and columns in stack traces stay as they were. The module stays registered in its
/// context under [`PRELUDE_NAME`], where `import()` could reach its namespace; `take` hands the
/// function out once and clears the binding, so the namespace holds nothing after that.
fn prelude_module_source() -> String {
    let mut source = String::with_capacity(PRELUDE.len() + 160);
    source.push_str("let prelude = ");
    source.push_str(PRELUDE);
    source.push_str(
        "\n;export function take() { const taken = prelude; prelude = undefined; return taken; }\n",
    );
    source
}

/// The function `prelude.js` evaluates to, from this process's bytecode (compiled here by the
/// first VM, which then publishes it; a VM that fails to compile it, e.g. out of memory,
/// publishes nothing and the next one tries again).
pub(super) fn load_prelude<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Function<'js>> {
    let module = match PRELUDE_BYTECODE.get() {
        // SAFETY: the bytes were written by `Module::write` of this same QuickJS build in this
        // process, from the prelude compiled below; nothing else ever sets them.
        Some(bytes) => unsafe { Module::load(ctx.clone(), bytes)? },
        None => {
            let module = Module::declare(ctx.clone(), PRELUDE_NAME, prelude_module_source())?;
            let _ = PRELUDE_BYTECODE.set(module.write(WriteOptions::default())?);
            module
        }
    };
    let (module, evaluated) = module.eval()?;
    // The module has no top-level await, so its evaluation has settled by now.
    match evaluated.result::<()>() {
        Some(result) => result?,
        None => {
            return Err(rquickjs::Exception::throw_message(
                ctx,
                "the prelude module did not finish evaluating",
            ));
        }
    }
    let take: Function = module.get("take")?;
    take.call(())
}
