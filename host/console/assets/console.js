// The gatehouse console's page script. Plain JavaScript, no dependencies.
//
// Every word from a server, a guest or a client is put into the page as a
// text node (textContent), never as markup, and control and bidirectional
// formatting characters are shown as visible escapes. A URL is shown, never
// opened or linked.
"use strict";

(function () {
  const csrf = meta("gatehouse-csrf");
  const view = meta("gatehouse-view");

  function meta(name) {
    const element = document.querySelector('meta[name="' + name + '"]');
    return element ? element.getAttribute("content") : "";
  }

  // Control characters (but tab and newline), C1 controls, and the
  // characters that reorder text (bidi embeddings, overrides, isolates,
  // marks) become visible escapes such as \u{202E}.
  const HIDDEN = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F\u061C\u200B-\u200F\u2028-\u202E\u2060-\u2069\uFEFF]/g;

  function show(text) {
    return String(text).replace(HIDDEN, function (c) {
      return "\\u{" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") + "}";
    });
  }

  function el(tag, attributes, children) {
    const element = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === false || value === undefined || value === null) continue;
      element.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children || []) {
      if (child === null || child === undefined) continue;
      // Anything that is not one of our elements is a server's word: text.
      element.append(child instanceof Node ? child : document.createTextNode(show(String(child))));
    }
    return element;
  }

  function setStatus(text) {
    const status = document.getElementById("link-state");
    if (status) status.textContent = text;
  }

  // ---- Questions --------------------------------------------------------

  const cards = new Map(); // id -> {card, open, timer}
  let serial = 0;

  function timeLeft(deadline) {
    const left = Math.max(0, Math.round((deadline - Date.now()) / 1000));
    const minutes = Math.floor(left / 60);
    const seconds = left % 60;
    return left === 0 ? "time is up" : minutes + " min " + seconds + " s left";
  }

  function describeClient(question) {
    const parts = [];
    if (question.session !== null && question.session !== undefined) parts.push("session " + question.session);
    if (question.client) parts.push(question.client.name + " " + question.client.version);
    return parts.join(", ") || "no session";
  }

  function verdictTable(verdicts) {
    if (!verdicts || verdicts.length === 0) return el("p", { class: "muted" }, ["No module ran."]);
    const body = verdicts.map(function (v) {
      return el("tr", {}, [
        el("td", {}, [v.module]),
        el("td", {}, [v.outcome]),
        el("td", {}, [v.risk || ""]),
        el("td", {}, [v.rationale || ""]),
      ]);
    });
    return el("table", { class: "verdicts" }, [
      el("thead", {}, [el("tr", {}, [
        el("th", { scope: "col" }, ["Module"]), el("th", { scope: "col" }, ["Verdict"]),
        el("th", { scope: "col" }, ["Risk"]), el("th", { scope: "col" }, ["Rationale"]),
      ])]),
      el("tbody", {}, body),
    ]);
  }

  // The choices of an enum property: [{value, title}], from `enum` (with
  // `enumNames`), `oneOf`/`anyOf` of `const`+`title`, or an array's items.
  function choices(property) {
    if (Array.isArray(property.enum)) {
      const names = Array.isArray(property.enumNames) ? property.enumNames : [];
      return property.enum.map(function (value, i) { return { value: value, title: names[i] !== undefined ? names[i] : value }; });
    }
    const options = property.oneOf || property.anyOf;
    if (Array.isArray(options)) {
      return options.filter(function (o) { return o !== null && typeof o === "object" && "const" in o; }).map(function (o) {
        return { value: o.const, title: o.title !== undefined ? o.title : o.const };
      });
    }
    return null;
  }

  // One field of the form: its element and a function reading its value
  // (undefined: left out).
  function field(name, property, required, prefix) {
    const id = prefix + "-" + serial++;
    const label = property.title !== undefined ? property.title : name;
    const description = property.description ? el("p", { class: "hint", id: id + "-hint" }, [property.description]) : null;
    const described = description ? id + "-hint" : null;
    const type = property.type;
    const wrap = function (input, labelFirst) {
      const labelElement = el("label", { for: id }, [label, required ? " (required)" : ""]);
      return el("div", { class: "field" }, labelFirst === false ? [input, labelElement, description] : [labelElement, input, description]);
    };

    if (type === "array") {
      const items = property.items || {};
      const options = choices(items) || [];
      const boxes = options.map(function (option, i) {
        const boxId = id + "-" + i;
        const box = el("input", { type: "checkbox", id: boxId, name: name, value: String(option.value) });
        if (Array.isArray(property.default) && property.default.indexOf(option.value) >= 0) box.checked = true;
        return { box: box, option: option, element: el("div", { class: "choice" }, [box, el("label", { for: boxId }, [String(option.title)])]) };
      });
      const fieldset = el("fieldset", { class: "field", "aria-describedby": described }, [
        el("legend", {}, [label, required ? " (required)" : ""]),
        ...boxes.map(function (b) { return b.element; }),
        description,
      ]);
      return {
        element: fieldset,
        read: function () {
          const picked = boxes.filter(function (b) { return b.box.checked; }).map(function (b) { return b.option.value; });
          const min = property.minItems !== undefined ? property.minItems : (required ? 1 : 0);
          if (picked.length < min) return { error: label + ": choose at least " + min };
          if (property.maxItems !== undefined && picked.length > property.maxItems) return { error: label + ": choose at most " + property.maxItems };
          return { value: picked.length === 0 && !required ? undefined : picked };
        },
      };
    }

    const options = choices(property);
    if (options) {
      const select = el("select", { id: id, name: name, required: required, "aria-describedby": described }, [
        el("option", { value: "" }, ["— choose —"]),
        ...options.map(function (option, i) {
          return el("option", { value: String(i) }, [String(option.title)]);
        }),
      ]);
      const def = options.findIndex(function (o) { return o.value === property.default; });
      if (def >= 0) select.value = String(def);
      return {
        element: wrap(select),
        read: function () {
          if (select.value === "") return { value: undefined };
          return { value: options[Number(select.value)].value };
        },
      };
    }

    if (type === "boolean") {
      const box = el("input", { type: "checkbox", id: id, name: name, "aria-describedby": described });
      box.checked = property.default === true;
      return { element: wrap(box, false), read: function () { return { value: box.checked }; } };
    }

    if (type === "number" || type === "integer") {
      const input = el("input", {
        type: "number", id: id, name: name, required: required, "aria-describedby": described,
        min: property.minimum, max: property.maximum, step: type === "integer" ? "1" : "any",
      });
      if (typeof property.default === "number") input.value = String(property.default);
      return {
        element: wrap(input),
        read: function () {
          if (input.value === "") return { value: undefined };
          const number = Number(input.value);
          return { value: number };
        },
      };
    }

    // A string.
    const kinds = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };
    const input = el("input", {
      type: kinds[property.format] || "text", id: id, name: name, required: required, "aria-describedby": described,
      minlength: property.minLength, maxlength: property.maxLength,
    });
    if (typeof property.default === "string") input.value = property.default;
    return {
      element: wrap(input),
      read: function () {
        if (input.value === "") return { value: undefined };
        if (property.format === "date-time") {
          const when = new Date(input.value);
          if (isNaN(when.getTime())) return { error: label + ": not a date and time" };
          return { value: when.toISOString() };
        }
        return { value: input.value };
      },
    };
  }

  function post(path, body) {
    return fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Gatehouse-CSRF": csrf },
      body: JSON.stringify(body),
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (json) {
        return { ok: response.ok, status: response.status, json: json };
      });
    });
  }

  function card(open) {
    const q = open.question;
    const ask = q.ask;
    const prefix = "q" + open.id;
    const problem = el("p", { class: "problem", role: "alert" }, []);
    const status = el("p", { class: "status", role: "status" }, []);
    const timer = el("span", { class: "time" }, [timeLeft(open.deadline_ms)]);

    const facts = el("dl", { class: "facts" }, [
      el("dt", {}, ["Server"]), el("dd", {}, [q.server]),
      el("dt", {}, ["Client"]), el("dd", {}, [describeClient(q)]),
      el("dt", {}, ["Instance"]), el("dd", {}, [open.instance]),
      el("dt", {}, ["Why you"]), el("dd", {}, [q.why]),
    ]);
    const call = q.call
      ? el("div", { class: "call" }, [
          el("h3", {}, ["The agent's call"]),
          el("p", {}, [el("code", {}, [q.call.name])]),
          el("pre", { class: "arguments", tabindex: "0" }, [JSON.stringify(q.call.arguments === undefined ? null : q.call.arguments, null, 2)]),
        ])
      : el("p", { class: "muted" }, ["No agent call is known for this question."]);

    const fields = [];
    const body = [];
    if (ask.mode === "form") {
      const schema = ask.requested_schema || {};
      const required = Array.isArray(schema.required) ? schema.required : [];
      for (const [name, property] of Object.entries(schema.properties || {})) {
        const f = field(name, property || {}, required.indexOf(name) >= 0, prefix);
        fields.push({ name: name, field: f });
        body.push(f.element);
      }
    } else {
      body.push(el("div", { class: "url" }, [
        el("p", {}, ["The server asks you to open this address yourself, if you trust it:"]),
        el("p", {}, [el("strong", {}, ["Host: "]), el("code", { class: "host" }, [open.url_host || "(none: not a web address)"])]),
        el("pre", { class: "address", tabindex: "0" }, [ask.url]),
      ]));
    }

    const accept = el("button", { type: "submit", class: "accept" }, [ask.mode === "form" ? "Accept and send" : "Accept"]);
    const decline = el("button", { type: "button", class: "decline" }, ["Decline"]);
    const cancel = el("button", { type: "button", class: "cancel" }, ["Cancel"]);
    const form = el("form", { class: "answer", novalidate: false }, [...body, el("div", { class: "buttons" }, [accept, decline, cancel]), problem]);

    const element = el("article", { class: "question", id: "question-" + open.id, "data-id": open.id, "aria-labelledby": prefix + "-title" }, [
      el("h2", { id: prefix + "-title", tabindex: "-1" }, [q.server, ": ", ask.mode === "form" ? "asks for input" : "asks you to open a URL", " "]),
      timer,
      el("p", { class: "message" }, [ask.message]),
      facts,
      call,
      el("h3", {}, ["The modules"]),
      verdictTable(q.verdicts),
      form,
      status,
    ]);

    function send(action, content) {
      problem.textContent = "";
      const answer = { id: open.id, action: action };
      if (content !== undefined) answer.content = content;
      for (const b of [accept, decline, cancel]) b.disabled = true;
      post("/api/answer", answer).then(function (result) {
        if (!result.ok) {
          problem.textContent = show(result.json.error || ("refused (" + result.status + ")"));
          if (result.status !== 409 && result.status !== 410 && result.status !== 404) {
            for (const b of [accept, decline, cancel]) b.disabled = false;
          }
        }
      }, function () {
        problem.textContent = "The console could not be reached.";
        for (const b of [accept, decline, cancel]) b.disabled = false;
      });
    }

    form.addEventListener("submit", function (event) {
      event.preventDefault();
      if (ask.mode !== "form") return send("accept");
      if (!form.reportValidity()) return;
      const content = {};
      for (const { name, field: f } of fields) {
        const read = f.read();
        if (read.error) { problem.textContent = show(read.error); return; }
        if (read.value !== undefined) content[name] = read.value;
      }
      send("accept", content);
    });
    decline.addEventListener("click", function () { send("decline"); });
    cancel.addEventListener("click", function () { send("cancel"); });

    const tick = setInterval(function () { timer.textContent = timeLeft(open.deadline_ms); }, 1000);
    return { element: element, status: status, buttons: [accept, decline, cancel], tick: tick, open: open };
  }

  function closedLine(closed) {
    const q = closed.open.question;
    const how = closed.closed;
    let text;
    if (how.how === "answered") text = how.action + " by console session " + how.session;
    else if (how.how === "withdrawn") text = "withdrawn by its instance (time up, call ended or server gone)";
    else text = "its instance went away";
    return el("li", { "data-id": closed.open.id }, [
      el("time", {}, [new Date(closed.at_ms).toLocaleTimeString()]), " ",
      el("strong", {}, [q.server]), ": ", q.ask.message.slice(0, 120), " — ", text,
    ]);
  }

  // A card that shows only what is sure to render, for a question whose
  // schema the page could not turn into a form: it can still be declined
  // or cancelled.
  function plainCard(open, error) {
    const q = open.question || {};
    const status = el("p", { class: "status", role: "status" }, []);
    const problem = el("p", { class: "problem", role: "alert" }, ["This question's form could not be shown (" + String(error) + "); it can be declined or cancelled."]);
    const decline = el("button", { type: "button", class: "decline" }, ["Decline"]);
    const cancel = el("button", { type: "button", class: "cancel" }, ["Cancel"]);
    const element = el("article", { class: "question", id: "question-" + open.id, "data-id": open.id }, [
      el("h2", { tabindex: "-1" }, [String(q.server), ": asks for input"]),
      el("p", { class: "message" }, [String(q.ask && q.ask.message)]),
      problem,
      el("div", { class: "buttons" }, [decline, cancel]),
      status,
    ]);
    const send = function (action) {
      decline.disabled = cancel.disabled = true;
      post("/api/answer", { id: open.id, action: action }).then(function (result) {
        if (!result.ok) { status.textContent = show(result.json.error || "refused"); decline.disabled = cancel.disabled = false; }
      });
    };
    decline.addEventListener("click", function () { send("decline"); });
    cancel.addEventListener("click", function () { send("cancel"); });
    return { element: element, tick: null, open: open };
  }

  function addQuestion(open) {
    if (cards.has(open.id)) return;
    let made;
    try {
      made = card(open);
    } catch (error) {
      made = plainCard(open, error);
    }
    // How long after the console took the question it was on this page
    // (both clocks are this machine's when the page is on loopback).
    made.element.dataset.shownAfterMs = String(Date.now() - open.asked_at_ms);
    cards.set(open.id, made);
    document.getElementById("questions").append(made.element);
    refreshEmpty();
  }

  function closeQuestion(id, closed, atMs) {
    const made = cards.get(id);
    if (!made) return;
    clearInterval(made.tick);
    cards.delete(id);
    // Keep the keyboard where the person is: on the next question's heading,
    // or on the list of closed questions when none is left.
    const hadFocus = made.element.contains(document.activeElement);
    const next = made.element.nextElementSibling || made.element.previousElementSibling;
    made.element.remove();
    if (hadFocus) {
      const heading = next && next.querySelector("h2");
      const target = heading || document.getElementById("closed-heading");
      if (target) target.focus();
    }
    const list = document.getElementById("closed");
    list.prepend(closedLine({ open: made.open, closed: closed, at_ms: atMs }));
    refreshEmpty();
  }

  function refreshEmpty() {
    const empty = document.getElementById("empty");
    if (empty) empty.hidden = cards.size > 0;
  }

  function showInstances(instances) {
    const line = document.getElementById("instances");
    if (!line) return;
    line.textContent = instances.length === 0
      ? "No gatehouse serve instance is attached."
      : show(instances.length + " instance" + (instances.length === 1 ? "" : "s") + " attached: " +
          instances.map(function (i) { return i.instance + " (pid " + i.pid + ")"; }).join(", "));
  }

  function snapshot(state) {
    const open = new Set(state.open.map(function (o) { return o.id; }));
    for (const [id, made] of cards) {
      if (!open.has(id)) { clearInterval(made.tick); made.element.remove(); cards.delete(id); }
    }
    state.open.forEach(addQuestion);
    const list = document.getElementById("closed");
    list.replaceChildren(...state.closed.slice().reverse().map(closedLine));
    showInstances(state.instances);
    refreshEmpty();
  }

  // Follows the event stream; when the browser gives it up (the console
  // restarted, the session ended), says whether to log in again, or opens
  // a new one.
  function follow(onEvent) {
    const source = new EventSource("/api/events");
    source.addEventListener("open", function () { setStatus("live"); });
    source.addEventListener("error", function () {
      if (source.readyState !== EventSource.CLOSED) { setStatus("reconnecting…"); return; }
      fetch("/api/state", { credentials: "same-origin" }).then(function (response) {
        if (response.status === 401) {
          setStatus("");
          const status = document.getElementById("link-state");
          if (status) status.replaceChildren(el("a", { href: "/login" }, ["session ended: log in again"]));
        } else {
          setStatus("reconnecting…");
          setTimeout(function () { follow(onEvent); }, 2000);
        }
      }, function () {
        setStatus("the console is not reachable; retrying…");
        setTimeout(function () { follow(onEvent); }, 2000);
      });
    });
    onEvent(source);
  }

  function followQuestions() {
    follow(function (source) {
    source.addEventListener("snapshot", function (event) { snapshot(JSON.parse(event.data)); });
    source.addEventListener("change", function (event) {
      const change = JSON.parse(event.data);
      if (change.type === "asked") addQuestion(change.open);
      else if (change.type === "closed") closeQuestion(change.id, change.closed, change.at_ms);
      else if (change.type === "instances") showInstances(change.instances);
    });
    });
  }

  // ---- Instances: modules and backends -----------------------------------

  function table(headings, rows) {
    return el("table", {}, [
      el("thead", {}, [el("tr", {}, headings.map(function (h) { return el("th", { scope: "col" }, [h]); }))]),
      el("tbody", {}, rows.map(function (cells) { return el("tr", {}, cells.map(function (c) { return el("td", {}, [c]); })); })),
    ]);
  }

  function instanceSection(instance) {
    const status = instance.status;
    const parts = [el("h2", {}, ["Instance ", el("code", {}, [instance.instance]), " (pid " + instance.pid + ")"])];
    if (!status) {
      parts.push(el("p", { class: "muted" }, ["It has not reported its state yet."]));
      return el("section", { class: "instance" }, parts);
    }
    parts.push(el("p", {}, [
      "Config ", el("code", {}, [status.config]), "; ",
      status.in_flight + " elicitation(s) in flight; " + instance.open + " question(s) on this console; last chain swap: " +
        (status.swapped_at_ms ? new Date(status.swapped_at_ms).toLocaleString() : "not yet: the chain is loading, and elicitations wait for it") +
        "; conformance kit: " + (status.kit === "passed" ? "every module passed before the swap" :
          status.kit === "pending" ? "checking the modules (the chain is loading)" : "off"),
    ]));
    parts.push(el("h3", {}, ["Modules"]));
    parts.push(status.modules.length === 0 ? el("p", { class: "muted" }, ["No module: everything goes to the person."]) :
      table(["Module", "Mode", "sha256", "Signed by"], status.modules.map(function (m) {
        return [m.name, m.mode, el("code", { title: m.digest }, [m.digest.slice(0, 16) + "…"]), m.signer || "not signed (a local file or allow_unsigned)"];
      })));
    parts.push(el("h3", {}, ["Backends"]));
    parts.push(status.backends.length === 0 ? el("p", { class: "muted" }, ["No MCP server."]) :
      table(["Server", "State", "Detail"], status.backends.map(function (b) { return [b.name, b.state, b.detail || ""]; })));
    return el("section", { class: "instance" }, parts);
  }

  function followInstances() {
    const list = document.getElementById("instance-list");
    const reloads = document.getElementById("reloads");
    function render(instances) {
      showInstances(instances);
      list.replaceChildren(...instances.map(instanceSection));
    }
    document.getElementById("reload-all").addEventListener("click", function () {
      post("/api/reload", {}).then(function (result) {
        const said = result.ok ? "asked " + result.json.asked + " instance(s) to reload" : (result.json.error || "refused");
        reloads.prepend(el("li", {}, [new Date().toLocaleTimeString(), " ", said]));
      });
    });
    follow(function (source) {
    source.addEventListener("snapshot", function (event) { render(JSON.parse(event.data).instances); });
    source.addEventListener("change", function (event) {
      const change = JSON.parse(event.data);
      if (change.type === "instances") render(change.instances);
      else if (change.type === "reloaded") {
        reloads.prepend(el("li", { class: change.line.startsWith("ok") ? "" : "problem" }, [
          new Date(change.at_ms).toLocaleTimeString(), " ", el("code", {}, [change.instance]), ": ", change.line,
        ]));
      }
    });
    });
  }

  // ---- Audit ------------------------------------------------------------

  function followAudit() {
    setStatus("");
    const form = document.getElementById("audit-filters");
    const tbody = document.querySelector("#audit-records tbody");
    const full = document.getElementById("audit-record");
    const stats = document.getElementById("audit-stats");
    function load() {
      const query = new URLSearchParams();
      for (const [name, value] of new FormData(form)) if (value !== "") query.set(name, value);
      fetch("/api/audit?" + query.toString(), { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (found) {
          if (found.error) { stats.textContent = show(found.error); return; }
          const st = found.stats;
          const counts = function (map) { return Object.entries(map).map(function (e) { return e[0] + " " + e[1]; }).join(", ") || "none"; };
          const deciders = st.deciders.map(function (d) {
            return (d.module ? d.module + " (" + d.sha256.slice(0, 12) + "…)" : d.decided_by || "unknown") + " " + d.count;
          }).join(", ") || "none";
          const latency = st.latency_us ? "latency p50 " + st.latency_us.p50 + " µs, p90 " + st.latency_us.p90 +
            " µs, p99 " + st.latency_us.p99 + " µs, max " + st.latency_us.max + " µs" : "no latency";
          stats.textContent = show(st.records + " records (the newest " + found.records.length + " listed); decided by: " +
            counts(st.decided_by) + "; deciders: " + deciders + "; actions: " + counts(st.actions) + "; servers: " +
            counts(st.servers) + "; " + latency + (found.unreadable ? "; " + found.unreadable + " unreadable lines" : ""));
          tbody.replaceChildren(...found.records.map(function (record, i) {
            const open = el("button", { type: "button" }, ["Show"]);
            open.addEventListener("click", function () { full.textContent = show(JSON.stringify(record, null, 2)); full.focus(); });
            return el("tr", {}, [
              el("td", {}, [record.time || ""]), el("td", {}, [record.server || ""]), el("td", {}, [record.mode || ""]),
              el("td", {}, [record.decided_by || ""]), el("td", {}, [record.action || ""]), el("td", {}, [record.reason || ""]),
              el("td", {}, [open]),
            ]);
          }));
        });
    }
    form.addEventListener("submit", function (event) { event.preventDefault(); load(); });
    load();
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (view === "questions") followQuestions();
    else if (view === "audit") followAudit();
    else if (view === "instances") followInstances();
  });
})();
