// A conversation through the official AG-UI client (@ag-ui/client's HttpAgent), the same code in
// Node (cli.mjs) and in Chromium (bundled by esbuild into bundle.js, window.aguiConversation).
// Two turns: the first asks for a tool call that waits for approval, answered as the AG-UI tool
// call `approve_tool_call`; the second, when `clientTool` is given, asks for a tool the client
// runs, answered with a tool message. Returns every event seen, per AG-UI run, and the messages.
import { HttpAgent } from "@ag-ui/client";

function newId(prefix) {
  return `${prefix}-${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
}

// `approvalAction`: also send `approve_tool_call` among the tools, as a front end that renders
// approvals with an action of that name does (CopilotKit's human-in-the-loop); the run must not
// offer it to the model.
export async function conversation({
  url, headers, threadId, first, second, clientTool, answer, approvalAction,
}) {
  const agent = new HttpAgent({ url, headers, threadId });
  const runs = [];
  const tools = clientTool ? [clientTool] : [];
  if (approvalAction) {
    tools.push({
      name: "approve_tool_call",
      description: "Shows the person a tool call to approve or reject.",
      parameters: { type: "object", properties: { tool_call_id: { type: "string" } } },
    });
  }

  async function run() {
    const events = [];
    let error = null;
    try {
      await agent.runAgent(
        { runId: newId("run"), tools },
        { onEvent: ({ event }) => { events.push(event); } },
      );
    } catch (e) {
      error = String(e && e.message ? e.message : e);
    }
    runs.push({ events, error });
    return events;
  }

  function callsNamed(events, name) {
    return events.filter((e) => e.type === "TOOL_CALL_START" && (!name || e.toolCallName === name));
  }

  // turn 1: a message, an approval asked as a tool call, the answer, the reply
  agent.addMessage({ id: newId("user"), role: "user", content: first });
  let events = await run();
  for (const call of callsNamed(events, "approve_tool_call")) {
    agent.addMessage({
      id: newId("tool"),
      role: "tool",
      toolCallId: call.toolCallId,
      content: JSON.stringify({ approved: true, comment: "fine by me" }),
    });
  }
  if (callsNamed(events, "approve_tool_call").length) await run();

  // turn 2: the next message on the same thread; a client tool if the run asks for one
  agent.addMessage({ id: newId("user"), role: "user", content: second });
  events = await run();
  if (clientTool) {
    for (const call of callsNamed(events, clientTool.name)) {
      agent.addMessage({ id: newId("tool"), role: "tool", toolCallId: call.toolCallId, content: answer });
    }
    if (callsNamed(events, clientTool.name).length) await run();
  }
  return { runs, messages: agent.messages, threadId: agent.threadId };
}
