import type { SortState } from "../sorting";

type Props = { label: string; column: string; sort: SortState; onSort: (column: string) => void };

export function SortHeader({ label, column, sort, onSort }: Props) {
  const active = sort.key === column;
  return (
    <th
      className={active ? "sortable sorted" : "sortable"}
      aria-sort={active ? (sort.descending ? "descending" : "ascending") : "none"}
      data-column={column}
      onClick={() => onSort(column)}
    >
      {label}
      {active ? (sort.descending ? " ▼" : " ▲") : ""}
    </th>
  );
}
