// The pages sit inside Airflow's UI (a same-origin iframe) and look the part: they follow Airflow's
// light or dark mode, and in a DAG's or task's tab, where Airflow's navigation is already around
// them, they leave out their own top bar.
//
// Airflow's UI keeps the chosen mode in localStorage "theme" ("light", "dark" or "system") and marks
// its <html> with the class "light" or "dark"; a change in another tab reaches this one as a
// storage event, a change in the page around this frame as a class change on its <html>.

const STORAGE_KEY = "theme";
type Mode = "light" | "dark";

function parentRoot(): HTMLElement | null {
  try {
    return window.parent !== window ? window.parent.document.documentElement : null;
  } catch {
    return null; // another origin: only the stored choice and the system's are known
  }
}

function systemMode(): Mode {
  return window.matchMedia?.("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

/** Airflow's mode as the page around this one shows it, else as last chosen, else the system's. */
export function airflowMode(): Mode {
  const parent = parentRoot();
  if (parent?.classList.contains("dark")) return "dark";
  if (parent?.classList.contains("light")) return "light";
  const stored = window.localStorage?.getItem(STORAGE_KEY);
  if (stored === "dark" || stored === "light") return stored;
  return systemMode();
}

/** Whether the page is shown in an experiment DAG's or a trial task's tab (the plugin's hrefs for
 * those tabs say so with `?in=tab`, which stays in the URL as the page navigates by its hash). */
export function inAirflowTab(): boolean {
  return new URLSearchParams(window.location.search).get("in") === "tab";
}

/** Marks <html> with `data-theme` (and `data-in-tab`) and keeps the theme in step with Airflow's. */
export function followAirflow(): void {
  const root = document.documentElement;
  const apply = () => {
    root.dataset.theme = airflowMode();
  };
  apply();
  if (inAirflowTab()) root.dataset.inTab = "true";
  window.addEventListener("storage", (event) => {
    if (event.key === STORAGE_KEY) apply();
  });
  window.matchMedia?.("(prefers-color-scheme: dark)").addEventListener?.("change", apply);
  const parent = parentRoot();
  if (parent) new MutationObserver(apply).observe(parent, { attributes: true, attributeFilter: ["class"] });
}
