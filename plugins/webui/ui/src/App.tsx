import { ExperimentPage } from "./pages/ExperimentPage";
import { ExperimentsPage } from "./pages/ExperimentsPage";
import { QueuePage } from "./pages/QueuePage";
import { ResolvePage } from "./pages/ResolvePage";
import { TrialPage } from "./pages/TrialPage";
import { type Route, useRoute } from "./router";

export function App() {
  const route = useRoute();
  return (
    <>
      <nav className="topbar">
        <span className="brand">det</span>
        <a
          href="#/experiments"
          data-testid="nav-experiments"
          className={section(route) === "experiments" ? "current" : ""}
        >
          Experiments
        </a>
        <a href="#/queue" data-testid="nav-queue" className={section(route) === "queue" ? "current" : ""}>
          Job queue
        </a>
      </nav>
      <main>
        <Page route={route} />
      </main>
    </>
  );
}

function section(route: Route): string {
  return route.page === "queue" ? "queue" : "experiments";
}

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case "experiments":
      return <ExperimentsPage />;
    case "experiment":
      return <ExperimentPage key={route.id} id={route.id} />;
    case "trial":
      return <TrialPage key={route.id} id={route.id} />;
    case "queue":
      return <QueuePage />;
    case "resolve":
      return <ResolvePage dagId={route.dagId} runId={route.runId} mapIndex={route.mapIndex} />;
    case "unknown":
      return (
        <p className="error" data-testid="error">
          No page at #{route.path}.
        </p>
      );
  }
}
