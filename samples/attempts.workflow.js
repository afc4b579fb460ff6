export const meta = { name: 'attempts', description: 'Three agents attempt one change, each in a worktree of its own; a judge keeps the best', model: 'mine' };
const attempts = await parallel([1, 2, 3].map((i) => () => isolated(`${args.task}\nThis is attempt ${i}.`, { label: `attempt ${i}` })));
const done = attempts.filter((attempt) => attempt && attempt.changes.branch);
if (done.length === 0) return { keep: null };
const best = await judgePanel(done.map((attempt) => attempt.changes.diff), { judges: 1 });
return { keep: done[best.index].changes.branch, branches: done.map((attempt) => attempt.changes.branch) };
