import { frameForbids } from "./frame";
import { OPENING_PATH } from "./router";

// Tabs for task pages. A browser lets a page open a tab only during a click, and a frame sandboxed
// without `allow-popups` (Airflow's) not at all: such a frame asks Airflow's own window (same
// origin) to open it. That tab then refuses navigation from the sandboxed frame, so a tab opened
// before its task is known waits on the #/opening page for the task's id by message, and goes on
// to the task's page by itself.

const HAND_OVER_MS = 30_000;
const RESEND_MS = 250;

export type OpenTaskMessage = { openTask: number };

/** Opens `href` (relative to this page) in a new tab; null when the browser refused one. */
export function openTab(href: string): Window | null {
  const url = new URL(href, window.location.href).href;
  if (!frameForbids("allow-popups")) return window.open(url, "_blank");
  try {
    return window.top && window.top !== window ? window.top.open(url, "_blank") : null;
  } catch {
    return null;
  }
}

/** Opens a tab that waits for a task (see `handTask`); call it in the click's handler. */
export function openWaitingTab(): Window | null {
  return openTab(`#${OPENING_PATH}`);
}

/**
 * Tells a tab from `openWaitingTab` which task to open. The tab may still be loading, so the
 * message goes again until the tab has moved on (or is closed, or a while has passed).
 */
export function handTask(tab: Window, taskId: number): void {
  const started = Date.now();
  const message: OpenTaskMessage = { openTask: taskId };
  const send = () => {
    if (tab.closed || Date.now() - started > HAND_OVER_MS) return;
    try {
      const { href, hash } = tab.location;
      if (href !== "about:blank" && hash !== `#${OPENING_PATH}`) return;
    } catch {
      return; // it shows a page of another origin: it has moved on
    }
    tab.postMessage(message, window.location.origin);
    window.setTimeout(send, RESEND_MS);
  };
  send();
}

/** The task id in a message from a page of this origin, if it is one from `handTask`. */
export function taskToOpen(event: MessageEvent): number | null {
  if (event.origin !== window.location.origin) return null;
  const id = (event.data as Partial<OpenTaskMessage> | null)?.openTask;
  return typeof id === "number" && Number.isInteger(id) && id > 0 ? id : null;
}
