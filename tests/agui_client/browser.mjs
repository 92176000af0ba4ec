// The browser entry of the bundle (esbuild --bundle --format=iife): window.aguiConversation.
import { conversation } from "./conversation.mjs";
import { HttpAgent } from "@ag-ui/client";

window.aguiConversation = conversation;
window.AguiHttpAgent = HttpAgent;
