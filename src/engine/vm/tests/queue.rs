//! Halting a script, and what crosses from the script's thread to the driver: cut log lines
//! and phase titles, the queue's bounds and waits (not counted against the slice), the call
//! limit, and a batch of answers settling in order.

use super::*;

#[test]
fn halting_stops_a_waiting_script() {
    let (tx, mut rx) = super::event_queue();
    let vm = spawn(
        VmScript {
            body: "await agent('x');".into(),
            args: Value::Null,
            cwd: "/".into(),
            nested: None,
            files: Arc::default(),
            call_paths: true,
            budget: crate::budget::script_view(&Default::default(), &Default::default()),
            max_calls: u32::MAX,
        },
        VmLimits::default(),
        tx,
    );
    assert!(matches!(rx.blocking_recv(), Some(VmEvent::Call { .. })));
    drop(vm);
    assert!(rx.blocking_recv().is_none());
}

/// A huge log line is cut in the script's thread: what crosses to the driver is at most
/// 65,536 characters and a mark, however long the line the script built.
#[test]
fn a_huge_log_line_is_cut_before_it_crosses() {
    let (tx, mut rx) = super::event_queue();
    let _vm = spawn(
        test_script(
            "log('x'.repeat(4 * 1024 * 1024)); console.warn('short'); return 1;",
            BTreeMap::new(),
            true,
        ),
        VmLimits {
            slice_limit: Duration::from_millis(2000),
            memory_limit: 64 << 20,
        },
        tx,
    );
    let mut lines = Vec::new();
    loop {
        match rx.blocking_recv().expect("vm ended without finishing") {
            VmEvent::Log { level, message } => lines.push((level, message)),
            VmEvent::Finished(result) => {
                assert_eq!(result.ok(), Some(Some(serde_json::json!(1))));
                break;
            }
            _ => {}
        }
    }
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].1.chars().count(), 65_536 + 1);
    assert!(lines[0].1.ends_with('…'));
    assert_eq!(lines[1], ("warn".to_owned(), "short".to_owned()));
}

/// Waits (at most 10 s) until `rx` holds `count` queued events.
fn wait_for_queued(rx: &super::VmEventReceiver, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while rx.len() < count {
        assert!(Instant::now() < deadline, "only {} events queued", rx.len());
        std::thread::yield_now();
    }
}

/// Calls whose prompts weigh more than the queue may hold wait in the script's thread: the
/// queue holds [`EVENT_QUEUE_BYTES`] of them, a call lone in an empty queue passes whatever
/// it weighs, and each call taken lets the next one in.
#[test]
fn calls_past_the_queue_s_bytes_wait_in_the_script_s_thread() {
    const PROMPT: usize = 3 << 20;
    let (tx, mut rx) = event_queue();
    let vm = spawn(
        test_script(
            "const big = 'P'.repeat(3 << 20);\n\
             for (let i = 0; i < 50; i++) agent(big);\n\
             return 1;",
            BTreeMap::new(),
            true,
        ),
        VmLimits {
            slice_limit: Duration::from_secs(30),
            memory_limit: 32 << 20,
        },
        tx,
    );
    // What fits: each call weighs its prompt and a few bytes of scope and path.
    let fits = EVENT_QUEUE_BYTES / PROMPT;
    // Until the queue holds `fits` calls and the script waits for room for the next one.
    let wait_for_the_script = |rx: &super::VmEventReceiver| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while rx.len() < fits || !rx.weight().1 {
            assert!(
                Instant::now() < deadline,
                "the script never waited with {fits} calls queued: {} queued",
                rx.len()
            );
            std::thread::yield_now();
        }
    };
    wait_for_the_script(&rx);
    assert_eq!(rx.len(), fits, "the queue holds what fits in its bytes");
    assert!(rx.weight().0 <= EVENT_QUEUE_BYTES);
    assert!(matches!(rx.blocking_recv(), Some(VmEvent::Call { weight, .. }) if weight >= PROMPT));
    wait_for_the_script(&rx);
    assert_eq!(rx.len(), fits, "one taken lets one more in, and no more");
    rx.close();
    assert!(
        dropped_within(vm, Duration::from_secs(10)),
        "the VM waiting for room did not stop when the queue closed"
    );
}

/// Drops `vm` (joining its thread) off this thread; whether that ended within `limit`.
fn dropped_within(vm: VmHandle, limit: Duration) -> bool {
    let (joined_tx, joined) = std_mpsc::channel();
    std::thread::spawn(move || {
        drop(vm);
        let _ = joined_tx.send(());
    });
    joined.recv_timeout(limit).is_ok()
}

/// A script that logs without end fills its queue and waits there: the driver holds at most
/// [`EVENT_QUEUE`] of its messages, and closing the queue stops the waiting script.
#[test]
fn a_flooding_script_waits_on_its_full_queue_and_still_stops() {
    let (tx, mut rx) = event_queue();
    let vm = spawn(
        test_script("for (;;) log('flood');", BTreeMap::new(), true),
        VmLimits {
            slice_limit: Duration::from_secs(30),
            memory_limit: 16 << 20,
        },
        tx,
    );
    wait_for_queued(&rx, EVENT_QUEUE);
    // The driver's stop: close the queue, then join the VM off this thread, within a deadline.
    rx.close();
    assert!(
        dropped_within(vm, Duration::from_secs(10)),
        "the VM blocked on its full queue did not stop"
    );
    let mut queued = 0;
    while let Ok(event) = rx.try_recv() {
        assert!(matches!(event, VmEvent::Log { .. }), "{event:?}");
        queued += 1;
    }
    assert_eq!(queued, EVENT_QUEUE);
}

/// Time spent waiting on a full queue is the driver's, not the script's: a driver slower than
/// the slice limit does not make a logging script a runaway.
#[test]
fn waiting_on_a_full_queue_is_not_counted_against_the_slice() {
    let (tx, mut rx) = event_queue();
    let lines = 2 * EVENT_QUEUE;
    let _vm = spawn(
        test_script(
            &format!("for (let i = 0; i < {lines}; i++) log('line ' + i); return 'done';"),
            BTreeMap::new(),
            true,
        ),
        VmLimits {
            slice_limit: Duration::from_millis(300),
            memory_limit: 16 << 20,
        },
        tx,
    );
    wait_for_queued(&rx, EVENT_QUEUE);
    // A driver busy for longer than the script's slice limit before it reads again.
    std::thread::sleep(Duration::from_millis(600));
    let mut logged = 0;
    loop {
        match rx.blocking_recv().expect("vm ended without finishing") {
            VmEvent::Log { .. } => logged += 1,
            VmEvent::Finished(result) => {
                assert_eq!(result, Ok(Some(serde_json::json!("done"))));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(logged, lines);
}

/// A phase title is cut in the script's thread like a log line: at most 1,024 characters
/// and a mark cross to the driver.
#[test]
fn a_huge_phase_title_is_cut_before_it_crosses() {
    let (tx, mut rx) = event_queue();
    let _vm = spawn(
        test_script(
            "phase('p'.repeat(4 * 1024 * 1024)); phase('short'); return 1;",
            BTreeMap::new(),
            true,
        ),
        VmLimits {
            slice_limit: Duration::from_millis(2000),
            memory_limit: 64 << 20,
        },
        tx,
    );
    let mut titles = Vec::new();
    loop {
        match rx.blocking_recv().expect("vm ended without finishing") {
            VmEvent::Phase { title, .. } => titles.push(title),
            VmEvent::Finished(result) => {
                assert_eq!(result.ok(), Some(Some(serde_json::json!(1))));
                break;
            }
            _ => {}
        }
    }
    assert_eq!(titles.len(), 2);
    assert_eq!(titles[0].chars().count(), 1_024 + 1);
    assert!(titles[0].ends_with('…'));
    assert_eq!(titles[1], "short");
}

/// The call past `maxAgents` is refused in the script's thread with the driver's error, so
/// 100,000 calls started at once meet the limit instead of the heap's end.
#[test]
fn a_call_past_the_limit_rejects_like_a_failed_call_and_catch_handles_it() {
    let (tx, mut rx) = event_queue();
    let mut script = test_script(
        "await agent('first');\n\
         return await agent('second').catch((error) => error.code);",
        BTreeMap::new(),
        true,
    );
    script.max_calls = 1;
    let vm = spawn(script, VmLimits::default(), tx);
    let result = loop {
        match rx.blocking_recv().expect("vm ended without finishing") {
            VmEvent::Call { call_id, .. } => vm.reply(VmReply::Resolve {
                call_id,
                value: Value::Null,
            }),
            VmEvent::Finished(result) => break result.expect("the script handles the refusal"),
            _ => {}
        }
    };
    assert_eq!(result, Some(Value::from("AGENT_LIMIT_EXCEEDED")));
}

#[test]
fn calls_past_the_limit_are_refused_before_they_cross() {
    let (tx, mut rx) = event_queue();
    let mut script = test_script(
        "const a = await checkpoint('first');\n\
         const calls = [];\n\
         for (let i = 0; i < 100000; i++) calls.push(agent('task ' + i));\n\
         await Promise.all(calls);",
        BTreeMap::new(),
        true,
    );
    script.max_calls = 1_000;
    let vm = spawn(script, VmLimits::default(), tx);
    let mut crossed = 0;
    let failure = loop {
        match rx.blocking_recv().expect("vm ended without finishing") {
            VmEvent::Call { call_id, .. } => {
                crossed += 1;
                vm.reply(VmReply::Resolve {
                    call_id,
                    value: Value::Null,
                });
            }
            VmEvent::Finished(result) => break result.expect_err("the limit fails the script"),
            _ => {}
        }
    };
    assert_eq!(failure.code, "AGENT_LIMIT_EXCEEDED", "{failure:?}");
    assert_eq!(
        failure.message,
        "the run reached its limit of 1000 agent calls (maxAgents)"
    );
    // The checkpoint counts too, as the driver counts it.
    assert_eq!(crossed, 1_000);
}

/// A batch of answers is delivered one by one, each after the jobs the one before it queued
/// have run: as if each had come alone.
#[test]
fn a_batch_of_answers_settles_in_its_order_with_each_answer_s_jobs_between() {
    let (tx, mut rx) = event_queue();
    let script = test_script(
        "const seen = [];\n\
         const track = (name) => agent(name).then((answer) => {\n\
           seen.push(answer);\n\
           Promise.resolve().then(() => seen.push(answer + ' after'));\n\
         });\n\
         await Promise.all([track('a'), track('b'), track('c')]);\n\
         return seen;",
        BTreeMap::new(),
        false,
    );
    let vm = spawn(script, VmLimits::default(), tx);
    let mut calls = Vec::new();
    let result = loop {
        match rx.blocking_recv().expect("vm ended without finishing") {
            VmEvent::Call {
                call_id, payload, ..
            } => {
                calls.push((call_id, payload["prompt"].as_str().unwrap_or("").to_owned()));
                if calls.len() == 3 {
                    let by_name = |name: &str| {
                        let (call_id, prompt) = calls
                            .iter()
                            .find(|(_, prompt)| prompt == name)
                            .expect("called");
                        VmReply::Resolve {
                            call_id: *call_id,
                            value: Value::from(prompt.clone()),
                        }
                    };
                    vm.reply_all(vec![by_name("b"), by_name("c"), by_name("a")]);
                }
            }
            VmEvent::Finished(result) => break result.expect("the script ends"),
            _ => {}
        }
    };
    assert_eq!(
        result,
        Some(serde_json::json!([
            "b", "b after", "c", "c after", "a", "a after"
        ]))
    );
}
