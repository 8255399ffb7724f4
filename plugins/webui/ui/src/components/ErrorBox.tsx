export function ErrorBox({ error }: { error: string | null | undefined }) {
  if (!error) return null;
  return (
    <div className="error" role="alert" data-testid="error">
      {error}
    </div>
  );
}
