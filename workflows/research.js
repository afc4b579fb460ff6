// Research a question from several angles: one call picks the angles (unless you give them),
// researchers work on each angle in parallel, a critic points out gaps and contradictions,
// and a last call writes the answer. Copy it (`agentprism workflows show research --copy`) to
// change the angles, the critique or the answer's shape.
export const meta = {
  name: 'research',
  description: 'Research a question from several angles in parallel, critique the findings and synthesize an answer',
  whenToUse: 'A question that needs looking at from more than one side: how a codebase works, comparing approaches, investigating a behaviour.',
  phases: [
    { title: 'Angles', detail: 'choose the angles to research' },
    { title: 'Research', detail: 'one researcher per angle' },
    { title: 'Critique', detail: 'gaps and contradictions in the findings' },
    { title: 'Synthesis', detail: 'the answer' },
  ],
  inputSchema: {
    type: 'object',
    properties: {
      model: { type: 'string', minLength: 1, description: 'backend or backend/model for every call' },
      criticModel: { type: 'string', minLength: 1, description: 'route for the critic (default: model)' },
      question: { type: 'string', minLength: 1, description: 'what to find out' },
      angles: { type: 'array', items: { type: 'string', minLength: 1 }, minItems: 1, maxItems: 10, description: 'angles to research (default: chosen by an agent)' },
      maxAngles: { type: 'integer', minimum: 1, maximum: 10, description: 'most angles an agent may choose (default 4)' },
    },
    // An argument the script does not know is refused, so a misspelt knob is not ignored.
    additionalProperties: false,
    required: ['model', 'question'],
  },
};

// Defaults keep a run at 1 + 4 + 1 + 1 = 7 agent calls.
const maxAngles = args.maxAngles ?? 4;
const question = args.question;

phase('Angles');
let angles = args.angles;
if (!angles) {
  angles = await agent(
    `We want to answer this question:\n\n${question}\n\n` +
      `List at most ${maxAngles} distinct angles to research it from, each a short phrase.`,
    {
      model: args.model,
      label: 'angles',
      schema: { type: 'array', items: { type: 'string', minLength: 1 }, minItems: 1, maxItems: maxAngles },
    },
  );
}
angles = angles.slice(0, Math.max(maxAngles, args.angles?.length ?? 0));

phase('Research');
const notes = await parallel(
  angles.map((angle, i) => () =>
    agent(
      `Question: ${question}\n\nResearch it from this angle only: ${angle}.\n` +
        'Look at the sources you have (the repository, its docs). Report what you found with ' +
        'the evidence for it (files, lines, quotes), and say what you could not establish.',
      { model: args.model, label: `research:${i}` },
    ),
  ),
);
// A researcher that failed resolves to null; the answer is built from the others.
const found = angles.map((angle, i) => ({ angle, notes: notes[i] })).filter((entry) => entry.notes);
if (found.length === 0) return { question, angles, answer: null, error: 'every researcher failed' };
const dossier = found.map((entry) => `## ${entry.angle}\n\n${entry.notes}`).join('\n\n');

phase('Critique');
const critique = await agent(
  `Question: ${question}\n\nResearch notes:\n\n${dossier}\n\n` +
    'Point out contradictions between the notes, claims without evidence, and what is missing ' +
    'to answer the question. Be brief.',
  { model: args.criticModel ?? args.model, label: 'critique' },
);

phase('Synthesis');
const answer = await agent(
  `Question: ${question}\n\nResearch notes:\n\n${dossier}\n\nA critic's remarks:\n\n${critique ?? '(none)'}\n\n` +
    'Write the answer: direct, with the evidence it rests on, and say where it is uncertain.',
  { model: args.model, label: 'synthesis' },
);
return { question, angles: found.map((entry) => entry.angle), answer, critique };
