// Parses Mermaid text (stdin) with the real mermaid package and prints what it understood:
// {"type", "axisFormat", "tickInterval", "tasks": [{"section", "task", "start", "end",
// "milestone", "crit"}]} for a Gantt
// chart. mermaid needs a DOM even to parse, so jsdom provides one. Run from the directory
// whose node_modules holds mermaid and jsdom (tests/mermaid.py copies it there).
import { readFileSync } from "node:fs";
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!doctype html><html><body></body></html>", { pretendToBeVisual: true });
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
const text = readFileSync(0, "utf8");
try {
  await mermaid.parse(text); // registers the diagram types and checks the grammar
  const diagram = await mermaid.mermaidAPI.getDiagramFromText(text);
  const tasks = diagram.type === "gantt" ? diagram.db.getTasks() : [];
  console.log(JSON.stringify({
    type: diagram.type,
    axisFormat: diagram.type === "gantt" ? diagram.db.getAxisFormat() : null,
    tickInterval: diagram.type === "gantt" ? diagram.db.getTickInterval() : null,
    tasks: tasks.map((t) => ({
      section: t.section,
      task: t.task.trim(),
      start: new Date(t.startTime).getTime(),
      end: new Date(t.endTime).getTime(),
      milestone: Boolean(t.milestone),
      crit: Boolean(t.crit),
    })),
  }));
} catch (error) {
  console.log(JSON.stringify({ error: String(error && error.message ? error.message : error) }));
  process.exitCode = 1;
}
