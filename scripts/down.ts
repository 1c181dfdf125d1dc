/** `make down`: stops what `make up` started (by PID), from another terminal. */
import { stopLocalStack } from "./local/stack.ts";

await stopLocalStack();
console.log("doppiobox: stopped");
