// Migrate a codebase file by file: a plan lists the files, then each file goes through a
// pipeline of migrate and verify, and a file that fails verification is tried again with the
// verifier's feedback. The agents edit your working tree, one file each; commit first so the
// change is easy to review (`git diff`) or undo.
export const meta = {
  name: 'migrate',
  description: 'Migrate files one by one through a migrate-then-verify pipeline, retrying a file with the verifier\'s feedback',
  whenToUse: 'For a mechanical change across many files (an API rename, a framework upgrade, a new lint rule) where each file can be changed and checked on its own.',
  phases: [
    { title: 'Plan', detail: 'list the files to migrate (skipped when files are given)' },
    { title: 'Migrate', detail: 'each file: migrate, then verify, up to two tries' },
    { title: 'Report', detail: 'which files passed and which need a person' },
  ],
  inputSchema: {
    type: 'object',
    properties: {
      model: { type: 'string', description: 'Backend (or backend/model) for every agent' },
      instructions: { type: 'string', description: 'The migration, e.g. "replace moment with date-fns"' },
      files: { type: 'array', items: { type: 'string' }, description: 'Files to migrate; planned by an agent when absent' },
      verifyCommand: { type: 'string', description: 'A command the verifier runs for each file, e.g. "npm run typecheck"' },
      maxFiles: { type: 'integer', minimum: 1, maximum: 100, default: 8 },
      attempts: { type: 'integer', minimum: 1, maximum: 4, default: 2 },
    },
    required: ['model', 'instructions'],
  },
};

const maxFiles = args.maxFiles ?? 8;
const check = args.verifyCommand ? ` Run \`${args.verifyCommand}\` as part of the check.` : '';

phase('Plan');
const files = (args.files ?? (await agent(
  `List at most ${maxFiles} files of this repository that need this migration: ${args.instructions}\nAnswer paths relative to the repository root.`,
  { label: 'plan', model: args.model, schema: { type: 'array', items: { type: 'string' }, maxItems: maxFiles } },
)) ?? []).slice(0, maxFiles);

phase('Migrate');
const verdict = { type: 'object', properties: { ok: { type: 'boolean' }, feedback: { type: 'string' } }, required: ['ok', 'feedback'] };
const outcomes = await pipeline(files, (file) => gate(
  (feedback, i) => agent(
    `Apply this migration to ${file} only: ${args.instructions}` +
      (feedback ? `\nA reviewer rejected the previous try: ${feedback}` : ''),
    { label: `migrate:${file}:${i + 1}`, model: args.model },
  ),
  (work) => agent(
    `Check the migration of ${file} (${args.instructions}). The migrating agent said:\n${work}\n` +
      `Is the file fully migrated, and does it still work?${check}`,
    { label: `verify:${file}`, model: args.model, schema: verdict },
  ),
  { attempts: args.attempts ?? 2 },
).then((value) => ({ file, ok: true, value }), (error) => ({ file, ok: false, error: String(error?.message ?? error) })));

phase('Report');
const done = outcomes.filter((outcome) => outcome?.ok).map((outcome) => outcome.file);
return { instructions: args.instructions, migrated: done, needsAPerson: files.filter((file) => !done.includes(file)), outcomes };
