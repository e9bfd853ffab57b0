// gmailrelay console: progressive enhancement only; every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // A decision needs a note: keep its buttons disabled until one is written.
  // Once the form is submitted they stay disabled, so a double click sends
  // one decision (the server would refuse the second with a 409 page).
  document.querySelectorAll("form.resolve").forEach(function (form) {
    var note = form.querySelector("textarea[name=note]");
    var buttons = form.querySelectorAll("button[name=action]");
    var hint = form.querySelector("[data-testid=resolve-hint]");
    var submitted = false;
    // The hint says why the buttons are disabled, for as long as they are.
    function sync() {
      var empty = note.value.trim() === "";
      var off = submitted || empty;
      buttons.forEach(function (b) { b.disabled = off; });
      if (hint) {
        hint.textContent = submitted ? "Sending your decision…" : empty ? "Type a note to enable the decision buttons." : "";
        hint.hidden = !off;
      }
    }
    note.addEventListener("input", sync);
    form.addEventListener("submit", function (ev) {
      if (submitted) {
        ev.preventDefault();
        return;
      }
      submitted = true;
      // Not now: the browser builds the form's data after this event, and
      // a disabled button would leave out which one was pressed (action).
      setTimeout(sync, 0);
    });
    // Back to this page from the history cache: the form may be sent again.
    window.addEventListener("pageshow", function (ev) {
      if (ev.persisted) {
        submitted = false;
        sync();
      }
    });
    sync();
  });
});
