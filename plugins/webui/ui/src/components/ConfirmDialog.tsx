type Props = { message: string; onConfirm: () => void; onCancel: () => void };

/** A modal question; nothing is sent until the user presses OK. */
export function ConfirmDialog({ message, onConfirm, onCancel }: Props) {
  return (
    <div className="overlay" role="presentation" onClick={onCancel}>
      <div className="dialog" role="dialog" aria-modal="true" onClick={(event) => event.stopPropagation()}>
        <p>{message}</p>
        <div className="buttons">
          <button type="button" onClick={onCancel} data-testid="confirm-cancel">
            Cancel
          </button>
          <button type="button" className="primary" onClick={onConfirm} data-testid="confirm-ok" autoFocus>
            OK
          </button>
        </div>
      </div>
    </div>
  );
}
