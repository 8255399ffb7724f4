import { useCallback, useEffect, useRef, useState } from "react";
import { errorText } from "./api";

export type Data<T> = {
  data: T | undefined;
  error: string | null;
  loading: boolean;
  reload: () => void;
};

/**
 * Loads `load()` when `key` changes and again every `refreshMs` while `refreshMs` is set, keeping
 * the last good answer on screen while the next one is on its way.
 */
export function useData<T>(load: () => Promise<T>, key: string, refreshMs?: number | null): Data<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  const shownKey = useRef(key);

  useEffect(() => {
    let cancelled = false;
    if (shownKey.current !== key) {
      shownKey.current = key;
      setData(undefined);
    }
    setLoading(true);
    loadRef
      .current()
      .then((value) => {
        if (cancelled) return;
        setData(value);
        setError(null);
      })
      .catch((err: unknown) => {
        if (!cancelled) setError(errorText(err));
      })
      .finally(() => {
        if (!cancelled) setLoading(false);
      });
    return () => {
      cancelled = true;
    };
  }, [key, tick]);

  useEffect(() => {
    if (!refreshMs) return;
    const timer = window.setInterval(() => setTick((t) => t + 1), refreshMs);
    return () => window.clearInterval(timer);
  }, [refreshMs, key]);

  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data, error, loading, reload };
}
