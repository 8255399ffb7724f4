// Where a model of the registry lives in the pages: its id. Names are each owner's own, so two users'
// models may share one; the master reads a number in a model's place as its id.

export function modelPath(id: number | string): string {
  return `/models/${encodeURIComponent(String(id))}`;
}

export function modelHref(id: number | string): string {
  return `#${modelPath(id)}`;
}
