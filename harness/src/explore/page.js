// kvcc explore: the page is rendered on the server; this only reloads it once kvcc's
// search (the one `kvcc check` runs) has concluded, so the clauses show their verdicts.
(function () {
  if (document.body.dataset.verdict !== "checking") return;
  var wait = function () {
    fetch("/.kvcc/verdict").then(function (r) { return r.json(); }).then(function (v) {
      if (v.state === "checking") setTimeout(wait, 1000); else location.reload();
    }).catch(function () { setTimeout(wait, 2000); });
  };
  setTimeout(wait, 500);
})();
