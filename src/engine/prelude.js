// The workflow DSL, installed in every script realm before the script body runs.
//
// This file evaluates to one function, which the host calls once with the global object and
// a `host` record that never touches the global: host.call(kind, json) returns a promise of
// the call's answer (the driver answers with JSON, which the host parses into the value),
// host.agent(scope, prompt, path) does the same for an agent() call without options (the
// host builds its payload), host.log(level, text),
// host.phase(scope, title), host.nested(name, argsJson), host.file(path) (a companion text, or undefined when
// meta.files does not declare the path) and host.path(stack, wrapperLine, wrapperColumns) (the
// call path read from a stack text, or undefined). It returns the helpers only the host uses
// (`install`, `makeError`, `strictJson`, `setBudget`); the host keeps them, so no script can read,
// replace or call them, and nothing named `__ap_*` is ever a global. Everything a script can
// use is defined below on top of agent() and checkpoint(); helpers are plain agent() calls,
// so they are journaled and replayed like any other call.
(function (global, host) {
  "use strict";
  const hostCall = host.call;
  const hostAgent = host.agent;
  const hostLog = host.log;
  const hostPhase = host.phase;
  const hostNested = host.nested;
  const hostFile = host.file;
  const hostPath = host.path;

  const RealDate = global.Date;
  const RealFunction = global.Function;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const isFinite = Number.isFinite;
  const isInteger = Number.isInteger;
  const isArray = Array.isArray;
  const getPrototypeOf = Object.getPrototypeOf;
  const keys = Object.keys;
  const assign = Object.assign;
  const ObjectPrototype = Object.prototype;
  const apply = Reflect.apply;
  const RealSet = Set;
  const setHas = Set.prototype.has;
  const setAdd = Set.prototype.add;
  const setDelete = Set.prototype.delete;
  const isWellFormed = String.prototype.isWellFormed;

  // --- determinism guard (engine.md 1.3): aliases of Date/Math.random are caught here ---
  const unavailable = (what) => {
    const error = new Error(
      what + " is unavailable in workflow scripts (runs must replay deterministically)"
    );
    error.code = "SCRIPT_ERROR";
    return error;
  };
  function SafeDate(...values) {
    if (new.target === undefined) throw unavailable("Date()");
    if (values.length === 0) throw unavailable("new Date()");
    return Reflect.construct(RealDate, values, new.target);
  }
  // Scripts see it as `Date`: its own name must never reach an error message.
  Object.defineProperty(SafeDate, "name", { value: "Date", configurable: true });
  const dateSource = RealDate.toString();
  Object.defineProperty(SafeDate, "toString", {
    value: function toString() {
      return dateSource;
    },
    writable: true,
    configurable: true,
  });
  SafeDate.prototype = RealDate.prototype;
  SafeDate.UTC = RealDate.UTC;
  SafeDate.parse = RealDate.parse;
  SafeDate.now = function now() {
    throw unavailable("Date.now()");
  };
  Object.defineProperty(RealDate.prototype, "constructor", {
    value: SafeDate,
    writable: true,
    configurable: true,
  });
  global.Date = SafeDate;
  Math.random = function random() {
    throw unavailable("Math.random()");
  };
  // Every other clock is refused the same way: QuickJS-ng's `performance` (the host deletes
  // the real one before this runs, so `now` and `timeOrigin` here are the only ones), and
  // WeakRef/FinalizationRegistry, whose behaviour depends on when the collector runs.
  const performance = {};
  Object.defineProperty(performance, "now", {
    value: function now() {
      throw unavailable("performance.now()");
    },
    enumerable: true,
  });
  Object.defineProperty(performance, "timeOrigin", {
    get: function timeOrigin() {
      throw unavailable("performance.timeOrigin");
    },
    enumerable: true,
  });
  Object.freeze(performance);
  const refused = (name) =>
    function () {
      throw unavailable(name);
    };
  const clocks = {
    performance,
    WeakRef: refused("WeakRef"),
    FinalizationRegistry: refused("FinalizationRegistry"),
  };
  for (const name of Object.keys(clocks)) {
    Object.defineProperty(global, name, { value: clocks[name], writable: false, configurable: false, enumerable: false });
  }
  delete global.eval;

  // QuickJS-ng calls Error.prepareStackTrace with a CallSite per frame whose getFunction()
  // returns the frame's function even in strict code, which would hand a script the
  // prelude's closures (makeError, strictJson, callPath). It is fixed to undefined, so
  // stacks keep their default text and no script callback ever sees a frame.
  Object.defineProperty(global.Error, "prepareStackTrace", {
    value: undefined,
    writable: false,
    configurable: false,
    enumerable: false,
  });

  // --- the run's call limit (maxAgents), counted here as the driver counts it ---
  // Every agent() and checkpoint() call that reaches the host counts, in every scope of this
  // generation; a call past the limit is refused with the driver's own error before it
  // crosses. The first REJECTED_PAST_LIMIT such calls return a rejected promise like any
  // failed call (so `.catch` handles them); a script still starting calls after that is
  // running away, and the call throws where it is made, so a script that starts calls by the
  // hundred thousand in one go meets the limit error instead of filling its heap with
  // rejected promises.
  const REJECTED_PAST_LIMIT = 1000;
  let callLimit = Infinity;
  let callsMade = 0;
  let callsPastLimit = 0;
  function pastCallLimit(kind) {
    if (callsMade < callLimit) {
      callsMade++;
      return null;
    }
    callsPastLimit++;
    const what = kind === "agent" ? " agent calls" : " calls";
    return makeError("AGENT_LIMIT_EXCEEDED", "the run reached its limit of " + callLimit + what + " (maxAgents)", false);
  }

  // --- errors the host rejects with carry a code and a recoverable flag ---
  function makeError(code, message, recoverable) {
    const error = new Error(message);
    error.code = code;
    error.recoverable = recoverable;
    return error;
  }

  // Synchronous script frames as line:col, innermost first, joined by "<"; absent beyond 64.
  // The wrapper's invocation frame (its closing line) is not part of the script.
  let wrapperLine = 0;
  let wrapperColumns = 0;
  // Off in the dry run: only call rows and replay read a path, and the dry run has neither,
  // so it skips the stack walk (an Error and its printed frames per call).
  let withPaths = true;
  // The host reads the frames out of the stack text (vm/prelude.rs `call_path`).
  function callPath() {
    if (!withPaths) return null;
    const path = hostPath(new Error().stack || "", wrapperLine, wrapperColumns);
    return path === undefined ? null : path;
  }

  function isPlainObject(value) {
    return value !== null && typeof value === "object" && !Array.isArray(value);
  }

  // A result must be strict JSON: no functions, undefined inside containers, non-finite
  // numbers, cycles, or exotic objects. Returns the JSON text, or undefined for undefined.
  // It uses only built-ins captured above, so a script that replaces `Object.keys` or
  // `Array.isArray` cannot talk it into accepting something else.
  function strictJson(value) {
    if (value === undefined) return undefined;
    const seen = new RealSet();
    const check = (item, where) => {
      switch (typeof item) {
        case "string":
        case "boolean":
          return;
        case "number":
          if (!isFinite(item)) throw new TypeError(where + " is " + item + ", which is not JSON");
          return;
        case "object":
          break;
        default:
          throw new TypeError(where + " is a " + typeof item + ", which is not JSON");
      }
      if (item === null) return;
      if (apply(setHas, seen, [item])) throw new TypeError(where + " is a circular reference");
      apply(setAdd, seen, [item]);
      if (isArray(item)) {
        for (let i = 0; i < item.length; i++) {
          if (!(i in item) || item[i] === undefined)
            throw new TypeError(where + "[" + i + "] is undefined, which is not JSON");
          check(item[i], where + "[" + i + "]");
        }
      } else {
        const proto = getPrototypeOf(item);
        if (proto !== ObjectPrototype && proto !== null)
          throw new TypeError(where + " is not a plain object (" + ((item.constructor && item.constructor.name) || "unknown") + ")");
        const names = keys(item);
        for (let i = 0; i < names.length; i++) {
          const key = names[i];
          if (item[key] === undefined) continue;
          check(item[key], where + "." + key);
        }
      }
      apply(setDelete, seen, [item]);
    };
    check(value, "the result");
    return stringify(value);
  }

  const text = (value) => {
    if (typeof value === "string") return value;
    try {
      const json = stringify(value);
      return json === undefined ? String(value) : json;
    } catch (_) {
      return String(value);
    }
  };
  const joinArgs = (values) => values.map(text).join(" ");

  // A helper's options: an object (or nothing) whose every key the helper knows, so a typo
  // or an option of another product is an error instead of being ignored.
  function helperOptions(helper, options, known) {
    if (options === undefined || options === null) return {};
    if (!isPlainObject(options)) throw new TypeError(helper + "(): options must be an object");
    const names = keys(options);
    for (let i = 0; i < names.length; i++) {
      let found = false;
      for (let k = 0; k < known.length; k++) if (known[k] === names[i]) found = true;
      if (!found)
        throw new TypeError(
          helper + "() option " + stringify(names[i]) + " is not known; known options: " + known.join(", ")
        );
    }
    return options;
  }

  // A count option: a whole number of at least 1, or `fallback` when left out.
  function countOption(helper, name, value, fallback) {
    if (value === undefined || value === null) return fallback;
    if (typeof value !== "number" || !isInteger(value) || value < 1)
      throw new TypeError(helper + "() option " + name + " must be a whole number of at least 1, got " + text(value));
    return value;
  }

  // verify()'s lens: one string for every reviewer, or an array whose entries reviewers
  // take in turn (reviewer i gets entry i modulo its length); none when left out.
  function lensList(lens) {
    if (lens === undefined || lens === null) return [];
    const list = typeof lens === "string" ? [lens] : lens;
    const valid =
      isArray(list) && list.length > 0 && list.every((entry) => typeof entry === "string" && entry.trim() !== "");
    if (!valid)
      throw new TypeError("verify() option lens must be a non-empty string or a non-empty array of them, got " + text(lens));
    return list;
  }

  // Builds the DSL for one scope: the root script, or one nested workflow() invocation.
  function makeDsl(scope, args, cwd) {
    // A call past the limit: a rejected promise for the first REJECTED_PAST_LIMIT of them,
    // thrown after; null for a call within it.
    const refusal = (kind) => {
      const refused = pastCallLimit(kind);
      if (!refused) return null;
      if (callsPastLimit <= REJECTED_PAST_LIMIT) return Promise.reject(refused);
      throw refused;
    };
    const call = (kind, payload) =>
      refusal(kind) || hostCall(kind, stringify(assign({ scope }, payload)));
    // An agent() call without options, the common one, skips the JSON text: the host builds
    // the payload `call` would send ({scope, prompt, options: {}, path}) from its parts. A
    // prompt with a lone surrogate, which has no UTF-8 form, takes `call`.
    const plainAgent = (prompt, path) =>
      refusal("agent") || hostAgent(scope, prompt, path);
    const withoutOptions = (options) =>
      options === undefined ||
      (getPrototypeOf(options) === ObjectPrototype && keys(options).length === 0);

    function agent(prompt, options) {
      if (typeof prompt !== "string")
        throw new TypeError("agent(prompt, options?): prompt must be a string, got " + typeof prompt);
      if (options !== undefined && !isPlainObject(options))
        throw new TypeError("agent(prompt, options?): options must be an object");
      if (withoutOptions(options) && apply(isWellFormed, prompt, [])) return plainAgent(prompt, callPath());
      return call("agent", { prompt, options: options || {}, path: callPath() });
    }

    // agent() in a git worktree of the call's own, answering {result, changes}: the agent's
    // answer and what it changed (branch, commits, stat and a diff of at most diffBytes).
    function isolated(prompt, options) {
      if (typeof prompt !== "string")
        throw new TypeError("isolated(prompt, options?): prompt must be a string, got " + typeof prompt);
      if (options !== undefined && !isPlainObject(options))
        throw new TypeError("isolated(prompt, options?): options must be an object");
      const given = options || {};
      const agentOptions = {};
      const names = keys(given);
      for (let i = 0; i < names.length; i++)
        if (names[i] !== "diffBytes") agentOptions[names[i]] = given[names[i]];
      if (agentOptions.isolation === undefined || agentOptions.isolation === null) agentOptions.isolation = "worktree";
      let diffBytes = 65536;
      if (given.diffBytes !== undefined && given.diffBytes !== null) {
        diffBytes = given.diffBytes;
        if (typeof diffBytes !== "number" || !isInteger(diffBytes) || diffBytes < 1 || diffBytes > 1048576)
          throw new TypeError("isolated() option diffBytes must be a whole number from 1 to 1048576, got " + text(diffBytes));
      }
      return call("agent", { prompt, options: agentOptions, path: callPath(), outcome: { diffBytes } });
    }

    function checkpoint(promptText, options) {
      if (typeof promptText !== "string")
        throw new TypeError("checkpoint(text, options?): text must be a string");
      if (options !== undefined && !isPlainObject(options))
        throw new TypeError("checkpoint(text, options?): options must be an object");
      return call("checkpoint", { prompt: promptText, options: options || {}, path: callPath() });
    }

    const recoverable = (error) => !!(error && error.recoverable === true);

    function parallel(thunks) {
      if (!Array.isArray(thunks) || thunks.some((thunk) => typeof thunk !== "function"))
        throw new TypeError("parallel(thunks) expects an array of functions, e.g. parallel([() => agent('a'), () => agent('b')])");
      const started = thunks.map((thunk) => {
        try {
          return Promise.resolve(thunk());
        } catch (error) {
          return Promise.reject(error);
        }
      });
      return Promise.all(
        started.map((promise, index) =>
          promise.catch((error) => {
            if (recoverable(error)) {
              log("parallel[" + index + "] failed: " + (error && error.message));
              return null;
            }
            throw error;
          })
        )
      );
    }

    function pipeline(items, ...stages) {
      if (!Array.isArray(items)) throw new TypeError("pipeline(items, ...stages): items must be an array");
      if (stages.some((stage) => typeof stage !== "function"))
        throw new TypeError("pipeline(items, ...stages): every stage must be a function");
      return Promise.all(
        items.map(async (original, index) => {
          let value = original;
          for (const stage of stages) {
            try {
              value = await stage(value, original, index);
            } catch (error) {
              if (recoverable(error)) {
                log("pipeline[" + index + "] failed: " + (error && error.message));
                return null;
              }
              throw error;
            }
            if (value === null) return null;
          }
          return value;
        })
      );
    }

    async function workflow(nameOrScript, nestedArgs) {
      if (scope !== "root") throw new Error("workflow(): nested workflows may not nest again (one level)");
      if (typeof nameOrScript !== "string" || nameOrScript.length === 0)
        throw new TypeError("workflow(nameOrScript, args?): a saved workflow name or a script text is required");
      const loaded = parse(hostNested(nameOrScript, stringify(nestedArgs === undefined ? null : nestedArgs)));
      const dsl = makeDsl(loaded.scope, nestedArgs === undefined ? null : nestedArgs, cwd);
      const names = Object.keys(dsl);
      const body = new RealFunction(...names, "return (async function(){" + loaded.body + "\n})()");
      return body(...names.map((name) => dsl[name]));
    }

    async function verify(item, options) {
      const settings = helperOptions("verify", options, ["reviewers", "threshold", "lens"]);
      const reviewers = countOption("verify", "reviewers", settings.reviewers, 2);
      const threshold = settings.threshold === undefined || settings.threshold === null ? 0.5 : settings.threshold;
      if (typeof threshold !== "number" || !(threshold >= 0 && threshold <= 1))
        throw new TypeError("verify() option threshold must be a number from 0 to 1, got " + text(threshold));
      const lenses = lensList(settings.lens);
      const votes = await parallel(
        Array.from({ length: reviewers }, (_, i) => () =>
          agent(
            "Try to refute the following claim. Answer real=true only if it holds up." +
              (lenses.length ? "\nFocus on: " + lenses[i % lenses.length] : "") +
              "\n\n" + text(item),
            {
              label: "verify " + i,
              schema: {
                type: "object",
                properties: { real: { type: "boolean" }, reason: { type: "string" } },
                required: ["real"],
              },
            }
          )
        )
      );
      const counted = votes.filter((vote) => vote !== null);
      const realCount = counted.filter((vote) => vote.real === true).length;
      const total = counted.length;
      return { real: total > 0 && realCount / total >= threshold, realCount, total, votes };
    }

    async function judgePanel(attempts, options) {
      const settings = helperOptions("judgePanel", options, ["judges", "rubric"]);
      const judges = countOption("judgePanel", "judges", settings.judges, 3);
      if (settings.rubric !== undefined && settings.rubric !== null && typeof settings.rubric !== "string")
        throw new TypeError("judgePanel() option rubric must be a string, got " + text(settings.rubric));
      if (!Array.isArray(attempts) || attempts.length === 0)
        throw new TypeError("judgePanel(attempts, options): attempts must be a non-empty array");
      const rubric = settings.rubric ? "\nRubric: " + settings.rubric : "";
      const judgments = await parallel(
        attempts.flatMap((attempt, a) =>
          Array.from({ length: judges }, (_, j) => () =>
            agent("Score this attempt from 0 to 10." + rubric + "\n\n" + text(attempt), {
              label: "judge " + a + "." + j,
              schema: { type: "object", properties: { score: { type: "number" } }, required: ["score"] },
            })
          )
        )
      );
      let best = null;
      attempts.forEach((attempt, index) => {
        const scores = judgments
          .slice(index * judges, (index + 1) * judges)
          .filter((judgment) => judgment !== null)
          .map((judgment) => judgment.score);
        const score = scores.length ? scores.reduce((a, b) => a + b, 0) / scores.length : -Infinity;
        if (best === null || score > best.score) best = { index, attempt, score, judgments: scores };
      });
      if (best.score === -Infinity) best.score = null;
      return best;
    }

    async function loopUntilDry(options) {
      const settings = Object.assign(
        { key: (item) => stringify(item), consecutiveEmpty: 2, maxRounds: 50 },
        helperOptions("loopUntilDry", options, ["round", "key", "consecutiveEmpty", "maxRounds"])
      );
      if (typeof settings.round !== "function") throw new TypeError("loopUntilDry({round}): round must be a function");
      const seen = new Set();
      const collected = [];
      let dry = 0;
      for (let round = 0; round < settings.maxRounds && dry < settings.consecutiveEmpty; round++) {
        let found;
        try {
          found = await settings.round(round, collected.slice());
        } catch (error) {
          if (error && error.code === "AGENT_LIMIT_EXCEEDED") break;
          throw error;
        }
        let added = 0;
        for (const item of Array.isArray(found) ? found : found == null ? [] : [found]) {
          if (item === null || item === undefined) continue;
          const key = settings.key(item);
          if (seen.has(key)) continue;
          seen.add(key);
          collected.push(item);
          added++;
        }
        dry = added === 0 ? dry + 1 : 0;
      }
      return collected;
    }

    function completenessCheck(taskArgs, results) {
      const shown = text(results);
      return agent(
        "Task arguments:\n" + text(taskArgs) + "\n\nResults so far:\n" + (shown.length > 4000 ? shown.slice(0, 4000) : shown) +
          "\n\nIs the work complete? List what is missing, if anything.",
        {
          label: "completeness critic",
          schema: {
            type: "object",
            properties: { complete: { type: "boolean" }, missing: { type: "array", items: { type: "string" } } },
            required: ["complete"],
          },
        }
      );
    }

    async function retry(thunk, options) {
      const settings = helperOptions("retry", options, ["attempts", "until"]);
      const attempts = countOption("retry", "attempts", settings.attempts, 3);
      if (typeof thunk !== "function") throw new TypeError("retry(thunk, options?): thunk must be a function");
      let last = null;
      for (let i = 0; i < attempts; i++) {
        last = await thunk(i);
        if (!settings.until || settings.until(last)) return last;
      }
      return last;
    }

    // The verdict passes when it is `true` or an object with a truthy `ok`; the next
    // attempt gets the failed verdict's `feedback` (undefined when it has none), as the
    // TypeScript product's gate does.
    async function gate(thunk, validator, options) {
      const settings = helperOptions("gate", options, ["attempts"]);
      const attempts = countOption("gate", "attempts", settings.attempts, 3);
      if (typeof thunk !== "function" || typeof validator !== "function")
        throw new TypeError("gate(thunk, validator, options?): thunk and validator must be functions");
      let feedback = undefined;
      let value = null;
      let verdict = null;
      for (let i = 0; i < attempts; i++) {
        value = await thunk(feedback, i);
        verdict = await validator(value);
        if (verdict === undefined) verdict = null;
        const isObject = verdict !== null && typeof verdict === "object";
        if (verdict === true || (isObject && !!verdict.ok)) return { ok: true, value, verdict, attempts: i + 1 };
        feedback = isObject ? verdict.feedback : undefined;
      }
      return { ok: false, value, verdict, attempts };
    }

    // A log line is cut here, in the script's thread, before it crosses to the driver: a
    // script's huge lines cost its own heap, never the daemon's.
    const LOG_CHARS = 65536;
    const PHASE_CHARS = 1024;
    function sendLog(level, values) {
      const text = joinArgs(values);
      hostLog(level, text.length > LOG_CHARS ? text.slice(0, LOG_CHARS) + "…" : text);
    }
    function log(...values) {
      sendLog("log", values);
    }
    const console = {
      log: (...values) => sendLog("log", values),
      info: (...values) => sendLog("log", values),
      debug: (...values) => sendLog("log", values),
      warn: (...values) => sendLog("warn", values),
      error: (...values) => sendLog("error", values),
    };

    function phase(title) {
      if (arguments.length !== 1) {
        const error = new Error("phase(title) takes exactly one argument");
        error.code = "SCRIPT_ERROR";
        throw error;
      }
      if (typeof title !== "string" || title.trim() === "") throw new TypeError("phase(title): title must be a non-empty string");
      // Cut here like a log line, so a huge title never crosses to the driver.
      hostPhase(scope, title.length > PHASE_CHARS ? title.slice(0, PHASE_CHARS) + "…" : title);
    }

    const process = Object.freeze({ cwd: () => cwd });

    // A companion file's text, frozen at admission (meta.files). Nested workflows read the
    // run's files, the ones the root script declares.
    function file(path) {
      if (typeof path !== "string")
        throw new TypeError("file(path): path must be a string, got " + typeof path);
      const content = hostFile(path);
      if (typeof content !== "string") {
        const error = new Error(
          "file(" + stringify(path) + "): " + stringify(path) +
            " is not declared in meta.files; add it to meta.files to read it"
        );
        error.code = "SCRIPT_ERROR";
        throw error;
      }
      return content;
    }

    return {
      agent, isolated, checkpoint, parallel, pipeline, workflow, verify, judgePanel, loopUntilDry,
      completenessCheck, retry, gate, log, console, phase, args, cwd, process, file,
    };
  }

  // --- the run's budget (src/budget/): the host pushes the spend as calls settle ---
  // `view` is the host's script_view: {total, spent, remaining, costTotalUsd, costSpentUsd,
  // costRemainingUsd}, remaining null without a limit. Reading it never calls the host.
  let view = { total: null, spent: 0, remaining: null, costTotalUsd: null, costSpentUsd: 0, costRemainingUsd: null };
  function setBudget(viewJson) {
    view = parse(viewJson);
  }
  const budget = Object.freeze({
    get total() {
      return view.total;
    },
    spent: function spent() {
      return view.spent;
    },
    remaining: function remaining() {
      return view.remaining === null ? Infinity : view.remaining;
    },
    costUsd: Object.freeze({
      get total() {
        return view.costTotalUsd;
      },
      spent: function spent() {
        return view.costSpentUsd;
      },
      remaining: function remaining() {
        return view.costRemainingUsd === null ? Infinity : view.costRemainingUsd;
      },
    }),
  });

  // Defines the root scope's DSL as read-only globals. Called once, before the script body.
  let installed = false;
  function install(argsJson, cwd, lastLine, openColumns, paths, budgetJson, maxCalls) {
    if (installed) throw new Error("the DSL is already installed");
    installed = true;
    callLimit = maxCalls;
    wrapperLine = lastLine;
    wrapperColumns = openColumns;
    withPaths = paths === true;
    setBudget(budgetJson);
    const dsl = makeDsl("root", parse(argsJson), cwd);
    dsl.budget = budget;
    for (const name of Object.keys(dsl)) {
      Object.defineProperty(global, name, { value: dsl[name], writable: false, configurable: false, enumerable: false });
    }
  }

  return Object.freeze({ install, makeError, strictJson, setBudget });
});
