// Where a model of the registry lives in the pages: its name, which holds no "/", is the address.

export function modelPath(name: string): string {
  return `/models/${encodeURIComponent(name)}`;
}

export function modelHref(name: string): string {
  return `#${modelPath(name)}`;
}
