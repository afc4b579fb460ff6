// Research a question from several angles at once, let a critic look for gaps and
// contradictions, then synthesise one answer that says how sure it is. Copy it with
// `agentprism workflows show research --copy` to change the angles or the critic.
export const meta = {
  name: 'research',
  description: 'Research a question from several angles in parallel, critique the findings, and synthesise one answer',
  whenToUse: 'For a question that needs reading across a codebase or documents from more than one side: how something works, what a change would touch, which option to choose.',
  phases: [
    { title: 'Angles', detail: 'choose the angles (skipped when given)' },
    { title: 'Research', detail: 'one researcher per angle' },
    { title: 'Critique', detail: 'a critic looks for gaps and contradictions' },
    { title: 'Synthesis', detail: 'one answer from all of it' },
  ],
  inputSchema: {
    type: 'object',
    properties: {
      model: { type: 'string', description: 'Backend (or backend/model) for every agent' },
      question: { type: 'string', description: 'The question to answer' },
      angles: { type: 'array', items: { type: 'string' }, description: 'Angles to research from; chosen by an agent when absent' },
      maxAngles: { type: 'integer', minimum: 1, maximum: 10, default: 4 },
    },
    required: ['model', 'question'],
  },
};

const maxAngles = args.maxAngles ?? 4;

phase('Angles');
const angles = (args.angles ?? (await agent(
  `Name at most ${maxAngles} distinct angles from which to research this question, each a short phrase: ${args.question}`,
  { label: 'angles', model: args.model, schema: { type: 'array', items: { type: 'string' }, minItems: 1, maxItems: maxAngles } },
)) ?? []).slice(0, maxAngles);

phase('Research');
const notes = { type: 'object', properties: { findings: { type: 'array', items: { type: 'string' } }, sources: { type: 'array', items: { type: 'string' } } }, required: ['findings', 'sources'] };
const found = await parallel(angles.map((angle, i) => () =>
  agent(
    `Research this question from the angle "${angle}": ${args.question}\nGive findings you can back with a source (a file, a document, a command's output), and the sources.`,
    { label: `research:${i + 1}`, model: args.model, schema: notes },
  )));
const research = angles.map((angle, i) => ({ angle, ...(found[i] ?? { findings: [], sources: [] }) }));

phase('Critique');
const critique = await agent(
  `Question: ${args.question}\nFindings by angle:\n${JSON.stringify(research, null, 2)}\n\n` +
    'Point out gaps, contradictions between angles, and claims without a source.',
  { label: 'critique', model: args.model },
);

phase('Synthesis');
const answer = await agent(
  `Question: ${args.question}\nFindings by angle:\n${JSON.stringify(research, null, 2)}\nA critic's notes:\n${critique}\n\n` +
    'Answer the question in a few paragraphs. Say where the findings disagree and how sure the answer is.',
  { label: 'synthesis', model: args.model },
);
return { question: args.question, answer, angles: research, critique };
