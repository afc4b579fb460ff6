// Migrate files one by one: a plan lists the files (unless you give them), then each file goes
// through a pipeline: one agent migrates it, another verifies the result. A file that fails
// verification is migrated again through gate(), with the verifier's feedback, before it is
// reported as failed. Copy it (`agentprism workflows show migrate --copy`) to change the stages.
export const meta = {
  name: 'migrate',
  description: 'Apply a migration file by file, verifying each file and retrying the ones that fail',
  whenToUse: 'A mechanical change across many files (an API rename, a library upgrade, a new convention) that needs checking file by file.',
  phases: [
    { title: 'Plan', detail: 'list the files to migrate' },
    { title: 'Migrate', detail: 'migrate and verify each file, retrying a failed one' },
    { title: 'Report', detail: 'which files passed and which did not' },
  ],
  inputSchema: {
    type: 'object',
    properties: {
      model: { type: 'string', minLength: 1, description: 'backend or backend/model for every call' },
      verifierModel: { type: 'string', minLength: 1, description: 'route for the verifiers (default: model)' },
      instructions: { type: 'string', minLength: 1, description: 'the migration to apply' },
      files: { type: 'array', items: { type: 'string', minLength: 1 }, minItems: 1, description: 'files to migrate (default: chosen by an agent)' },
      maxFiles: { type: 'integer', minimum: 1, maximum: 100, description: 'most files migrated (default 5)' },
      verifyCommand: { type: 'string', minLength: 1, description: 'a command the verifier runs, e.g. "cargo check"' },
      attempts: { type: 'integer', minimum: 1, maximum: 4, description: 'tries per file, first included (default 2)' },
    },
    // An argument the script does not know is refused, so a misspelt knob is not ignored.
    additionalProperties: false,
    required: ['model', 'instructions'],
  },
};

// Defaults keep a run at 1 + 5 files x 2 attempts x 2 stages = 21 agent calls at most.
const maxFiles = args.maxFiles ?? 5;
const attempts = args.attempts ?? 2;
const verifierModel = args.verifierModel ?? args.model;
const check = args.verifyCommand ? ` Run \`${args.verifyCommand}\` as part of the check.` : '';

phase('Plan');
let files = args.files;
if (!files) {
  files = await agent(
    `We are applying this migration to the repository:\n\n${args.instructions}\n\n` +
      `List at most ${maxFiles} files it has to change, as paths. Do not change anything yet.`,
    {
      model: args.model,
      label: 'plan',
      schema: { type: 'array', items: { type: 'string', minLength: 1 }, minItems: 1, maxItems: maxFiles, uniqueItems: true },
    },
  );
}
files = files.slice(0, maxFiles);

phase('Migrate');
const verdictSchema = {
  type: 'object',
  properties: { ok: { type: 'boolean' }, feedback: { type: 'string' } },
  required: ['ok', 'feedback'],
};
// The two stages of one try: migrate the file, then verify it.
const migrateOnce = (file, feedback, i) =>
  agent(
    `Apply this migration to ${file} only:\n\n${args.instructions}` +
      (feedback ? `\n\nA previous try was rejected: ${feedback}\nFix that.` : ''),
    { model: args.model, label: `migrate:${file}:${i}` },
  );
const verifyOnce = (file, i) =>
  agent(
    `${file} was just migrated as follows:\n\n${args.instructions}\n\n` +
      `Check that the file is fully and correctly migrated and nothing else broke.${check} ` +
      'Answer ok=false with the problems as feedback when it is not.',
    { model: verifierModel, label: `verify:${file}:${i}`, schema: verdictSchema },
  );
// gate() is the retry loop: it migrates the file, asks the verifier (the validator), and on a
// failed verdict migrates again with the verifier's feedback, up to `attempts` tries.
// pipeline() runs the files side by side and hands each outcome to the next stage.
const results = await pipeline(
  files,
  (file) => {
    let tries = 0;
    return gate(
      (feedback, i) => {
        tries = i;
        return migrateOnce(file, feedback, i);
      },
      async () => {
        const verdict = await verifyOnce(file, tries);
        // A verifier that failed (null) is a failed verdict, never a pass.
        return verdict ?? { ok: false, feedback: 'the verifier gave no answer' };
      },
      { attempts },
    );
  },
  (outcome, file) => ({
    file,
    ok: outcome.ok,
    tries: outcome.attempts,
    notes: outcome.value,
    feedback: outcome.ok ? null : outcome.verdict?.feedback ?? null,
  }),
);

phase('Report');
const migrated = results.filter((result) => result?.ok).map((result) => result.file);
const failed = results
  .map((result, i) => result ?? { file: files[i], ok: false, feedback: 'the file was not migrated' })
  .filter((result) => !result.ok)
  .map(({ file, tries, feedback }) => ({ file, tries, feedback }));
return { instructions: args.instructions, migrated, failed };
