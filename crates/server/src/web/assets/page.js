// The redoguard page: reads this member's admin API once a second (/history, /status, and
// /report when the member is one of a configuration's members) and draws it with uPlot.
// Read-only: it only ever sends GET requests to the server that served it.
(function () {
  'use strict';

  const params = new URLSearchParams(location.search);
  const thresholdOverride = parseFloat(params.get('lag_threshold_s'));
  const PALETTE = ['#58a6ff', '#f0883e', '#3fb950', '#d2a8ff', '#ff7b72', '#e3b341',
    '#79c0ff', '#56d4dd', '#ffa198', '#a5d6ff'];

  const view = {
    samples: [],      // oldest first, as /history gives them
    capacity: 300,
    threshold: 30,
    lastT: 0,
    inConfiguration: null, // whether /configuration names members (then /report is used)
    report: null,
    status: null,
    lastOk: 0,
  };
  const charts = {};

  // ---- fetching --------------------------------------------------------------------------

  async function getJson(path) {
    const response = await fetch(path, { cache: 'no-store' });
    if (!response.ok) throw new Error(path + ': ' + response.status + ' ' + (await response.text()).trim());
    return response.json();
  }

  async function pollHistory() {
    const history = await getJson('/history?since=' + view.lastT);
    view.capacity = history.capacity;
    view.threshold = Number.isFinite(thresholdOverride) ? thresholdOverride : history.lag_threshold_s;
    for (const sample of history.samples) {
      if (sample.t_ms > view.lastT) {
        view.samples.push(sample);
        view.lastT = sample.t_ms;
      }
    }
    const keep = view.capacity;
    if (view.samples.length > keep) view.samples.splice(0, view.samples.length - keep);
  }

  async function pollConfiguration() {
    view.status = await getJson('/status');
    if (view.inConfiguration === null) {
      try {
        const configuration = await getJson('/configuration');
        view.inConfiguration = configuration.members.length > 0;
      } catch (error) {
        view.inConfiguration = false;
      }
    }
    if (view.inConfiguration) {
      try {
        view.report = await getJson('/report');
      } catch (error) {
        view.report = null; // the member's own view instead
      }
    }
  }

  async function tick() {
    try {
      await Promise.all([pollHistory(), pollConfiguration()]);
      view.lastOk = Date.now();
      render();
    } catch (error) {
      showError(error);
    }
    setTimeout(tick, 1000);
  }

  function showError(error) {
    const updated = document.getElementById('updated');
    updated.textContent = 'no answer: ' + error.message;
    updated.classList.add('stale');
  }

  // ---- formatting ------------------------------------------------------------------------

  function text(value) { return value === null || value === undefined ? '-' : String(value); }
  function seconds(value) {
    if (value === null || value === undefined) return '-';
    return value < 10 ? value.toFixed(3) + ' s' : value.toFixed(1) + ' s';
  }
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === 'text') node.textContent = value; else node.setAttribute(key, value);
    }
    for (const child of children || []) node.appendChild(child);
    return node;
  }
  function badge(id, label, kind) {
    const node = document.getElementById(id);
    node.textContent = label;
    node.className = 'badge' + (kind ? ' ' + kind : '');
    node.style.display = label ? '' : 'none';
  }
  function modeName(mode) { return String(mode || '').replace(/_/g, ' ').toUpperCase(); }

  // ---- the configuration -----------------------------------------------------------------

  // Rows of the members table: from the broker's report when there is one, else from this
  // member's own status (its destinations, or its primary).
  function memberRows() {
    const status = view.status;
    const threshold = view.threshold;
    if (view.report) {
      return view.report.members.map(function (member) {
        const standby = member.role === 'standby';
        return {
          name: member.name,
          role: member.reachable ? (member.fenced ? 'fenced' : member.role) : 'UNREACHABLE',
          transport: standby ? member.transport : '-',
          state: standby ? text(member.state) : text(member.writes),
          synchronized: standby ? member.synchronized : null,
          transportLag: member.transport_lag_s,
          applyLag: member.apply_lag_s,
          note: member.error || member.last_error || (member.warnings || []).join('; ') || '',
          down: !member.reachable || !!member.fenced,
          warn: (member.warnings || []).length > 0,
        };
      });
    }
    const roles = status.roles || {};
    const me = roles.member || 'this member';
    const replication = status.replication;
    const rows = [];
    if (replication.standby) {
      const standby = replication.standby;
      rows.push({
        name: standby.primary_member || standby.primary || 'primary', role: 'primary',
        transport: '-', state: standby.connected ? 'CONNECTED' : 'NOT CONNECTED',
        synchronized: null, transportLag: null, applyLag: null, note: standby.primary_peer || '',
        down: !standby.connected, warn: false,
      });
      rows.push({
        name: me + ' (here)', role: standby.far_sync ? 'far sync' : 'standby', transport: '-',
        state: standby.connected ? 'RECEIVING' : 'WAITING', synchronized: standby.caught_up,
        // (A far sync applies nothing: no apply lag.)
        transportLag: standby.transport_lag_s, applyLag: standby.far_sync ? null : standby.apply_lag_s,
        note: standby.last_error || '', down: false, warn: !!standby.last_error,
      });
      return rows;
    }
    const stall = status.database.redo.stall;
    rows.push({
      name: me + ' (here)', role: status.server.role, transport: '-',
      state: roles.gate ? String(roles.gate.state).toUpperCase() : '-', synchronized: null,
      transportLag: null, applyLag: null,
      note: status.server.writes_refused
        || (stall ? 'log writer stalled (commits answered "not durable yet"): ' + stall : '')
        || roles.last_error || '',
      down: !!status.server.writes_refused, warn: !!stall,
    });
    for (const destination of replication.destinations) {
      const synchronized = destination.phase === 'SYNCHRONIZED';
      const healthy = synchronized || destination.phase === 'STREAMING';
      rows.push({
        name: destination.name, role: 'standby',
        transport: destination.transport + (destination.transport === 'SYNC' ? (destination.affirm ? ' AFFIRM' : ' NOAFFIRM') : ''),
        state: destination.phase, synchronized: destination.transport === 'SYNC' ? synchronized : null,
        transportLag: destination.transport_lag_s, applyLag: destination.apply_lag_s,
        note: healthy ? '' : (destination.phase === 'DEFERRED' ? 'transport deferred (redoguard edit destination ' + destination.name + ' state=enable)' : (destination.last_error || '')),
        down: destination.phase === 'GAVE_UP', warn: !healthy,
      });
    }
    return rows.map(function (row) { row.threshold = threshold; return row; });
  }

  function renderConfiguration() {
    const status = view.status;
    if (!status) return;
    const roles = status.roles || {};
    const replication = status.replication;
    document.getElementById('member').textContent =
      (roles.member || status.server.resp_addr) + ' · ' + status.server.role +
      (roles.incarnation ? ' · incarnation ' + roles.incarnation : '');
    const facts = document.getElementById('facts');
    facts.replaceChildren(
      el('span', { text: 'RESP ' }), el('b', { text: status.server.resp_addr }),
      el('span', { text: '  ·  clients ' }), el('b', { text: String(status.server.connected_clients) }),
      el('span', { text: '  ·  SCN ' }), el('b', { text: String(status.database.redo.next_scn) }),
      el('span', { text: '  ·  keys ' }), el('b', { text: String(status.database.keys) }),
      el('span', { text: '  ·  up ' }), el('b', { text: status.server.uptime_s + ' s' }),
      el('span', { text: '  ·  v' + status.server.version }));
    const mode = view.report ? view.report.protection_mode : replication.protection_mode;
    badge('protection', modeName(mode), '');
    if (replication.synchronized === true) badge('synchronized', 'SYNCHRONIZED', 'ok');
    else if (replication.synchronized === false) badge('synchronized', 'UNSYNCHRONIZED', 'bad');
    else badge('synchronized', '', '');

    const threshold = view.threshold;
    const rows = memberRows();
    let worst = 'ok';
    const body = document.querySelector('#members tbody');
    body.replaceChildren(...rows.map(function (row) {
      const over = function (lag) { return lag !== null && lag !== undefined && lag > threshold; };
      const lagging = over(row.transportLag) || over(row.applyLag);
      const kind = row.down ? 'bad' : (lagging || row.warn || row.synchronized === false) ? 'warn' : 'ok';
      if (kind === 'bad' || (kind === 'warn' && worst === 'ok')) worst = kind;
      const tr = el('tr', { class: kind, 'data-member': row.name, 'data-lagging': String(lagging) }, [
        el('td', { text: row.name }),
        el('td', { text: row.role }),
        el('td', { text: row.transport }),
        el('td', { text: row.state }),
        el('td', { text: row.synchronized === null || row.synchronized === undefined ? '-' : (row.synchronized ? 'yes' : 'NO') }),
        el('td', { class: 'num' + (over(row.transportLag) ? ' over' : ''), text: seconds(row.transportLag) }),
        el('td', { class: 'num' + (over(row.applyLag) ? ' over' : ''), text: seconds(row.applyLag) }),
        el('td', { class: 'error', title: row.note, text: row.note }),
      ]);
      return tr;
    }));
    const warnings = view.report ? view.report.warnings : [];
    document.getElementById('warnings').replaceChildren(...warnings.map(function (warning) {
      return el('li', { text: warning });
    }));
    badge('verdict', worst === 'ok' ? 'ALL WELL' : worst === 'warn' ? 'WARNING' : 'ERROR', worst);
    document.querySelector('.threshold').textContent = '(threshold ' + threshold + ' s)';
    document.getElementById('capacity').textContent = String(Math.round(view.capacity / 60));
  }

  // ---- waits at log switches -------------------------------------------------------------

  // What a session held up by a log switch waits for, one wait event per reason (the server's
  // stats::LOG_FILE_SWITCH_WAITS, in its order).
  const SWITCH_WAITS = ['log file switch (checkpoint incomplete)', 'log file switch (archiving needed)',
    'log file switch (SYNC standby)', 'log file switch completion'];

  function renderSwitchWaits() {
    const status = view.status;
    if (!status) return;
    const body = document.querySelector('#switch-waits tbody');
    body.replaceChildren(...SWITCH_WAITS.map(function (name) {
      const wait = status.metrics.waits.find(function (w) { return w.name === name; });
      const ms = function (us) { return wait ? (us / 1000).toFixed(1) : '-'; };
      const count = wait ? wait.count : 0;
      return el('tr', { 'data-wait': name, 'data-count': String(count) }, [
        el('td', { text: name }),
        el('td', { class: 'num', text: String(count) }),
        el('td', { class: 'num', text: ms(wait && wait.total_us) }),
        el('td', { class: 'num', text: ms(wait && wait.avg_us) }),
        el('td', { class: 'num', text: ms(wait && wait.p99_us) }),
        el('td', { class: 'num', text: ms(wait && wait.max_us) }),
      ]);
    }));
  }

  // ---- the charts ------------------------------------------------------------------------

  // Dashed vertical lines where the log sequence moved on, labelled with the new sequence.
  function logSwitchMarks() {
    return {
      hooks: {
        draw: [function (u) {
          const ctx = u.ctx;
          ctx.save();
          ctx.strokeStyle = 'rgba(210, 153, 34, 0.75)';
          ctx.fillStyle = 'rgba(210, 153, 34, 0.95)';
          ctx.setLineDash([5 * devicePixelRatio, 4 * devicePixelRatio]);
          ctx.lineWidth = devicePixelRatio;
          ctx.font = (10 * devicePixelRatio) + 'px sans-serif';
          let labelledUpTo = -Infinity; // labels that would overlap are left out
          for (const sample of view.samples) {
            if (!sample.log_switches) continue;
            const x = Math.round(u.valToPos(sample.t_ms / 1000, 'x', true));
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
            ctx.beginPath();
            ctx.moveTo(x, u.bbox.top);
            ctx.lineTo(x, u.bbox.top + u.bbox.height);
            ctx.stroke();
            const label = 'log ' + sample.log_seq;
            if (x > labelledUpTo) {
              ctx.fillText(label, x + 3 * devicePixelRatio, u.bbox.top + 10 * devicePixelRatio);
              labelledUpTo = x + ctx.measureText(label).width + 8 * devicePixelRatio;
            }
          }
          ctx.restore();
        }],
      },
    };
  }

  // A horizontal line at the lag threshold, when it is within the plotted range.
  function thresholdLine() {
    return {
      hooks: {
        draw: [function (u) {
          const y = u.valToPos(view.threshold, 'y', true);
          if (!(y >= u.bbox.top && y <= u.bbox.top + u.bbox.height)) return;
          const ctx = u.ctx;
          ctx.save();
          ctx.strokeStyle = 'rgba(248, 81, 73, 0.9)';
          ctx.setLineDash([8 * devicePixelRatio, 4 * devicePixelRatio]);
          ctx.lineWidth = 1.5 * devicePixelRatio;
          ctx.beginPath();
          ctx.moveTo(u.bbox.left, y);
          ctx.lineTo(u.bbox.left + u.bbox.width, y);
          ctx.stroke();
          ctx.restore();
        }],
      },
    };
  }

  // What each chart plots: series labels and one value per sample for each.
  function chartData(name) {
    const s = view.samples;
    const one = function (label, pick) { return { labels: [label], columns: [s.map(pick)] }; };
    switch (name) {
      case 'commits': {
        const applied = s.some(function (x) { return x.applied_per_s > 0; });
        const data = one('commits/s', function (x) { return x.role ? x.commits_per_s : null; });
        if (applied) {
          data.labels.push('records applied/s');
          data.columns.push(s.map(function (x) { return x.role ? x.applied_per_s : null; }));
        }
        return data;
      }
      case 'redo':
        return one('redo MB/s', function (x) { return x.role ? x.redo_bytes_per_s / 1e6 : null; });
      case 'latency':
        return {
          labels: ['p50 ms', 'p99 ms'],
          columns: [
            s.map(function (x) { return x.commit_p50_us === null ? null : x.commit_p50_us / 1000; }),
            s.map(function (x) { return x.commit_p99_us === null ? null : x.commit_p99_us / 1000; }),
          ],
        };
      case 'lags': {
        const names = [];
        for (const x of s) for (const lag of x.lags) if (!names.includes(lag.name)) names.push(lag.name);
        const labels = [], columns = [];
        for (const name of names) {
          for (const kind of ['transport', 'apply']) {
            labels.push(name + ' ' + kind);
            columns.push(s.map(function (x) {
              const lag = x.lags.find(function (l) { return l.name === name; });
              return lag ? lag[kind + '_lag_s'] : null;
            }));
          }
        }
        return { labels: labels, columns: columns };
      }
      case 'waits': {
        // The events that took the most time over the whole window.
        const totals = new Map();
        for (const x of s) for (const w of x.waits) totals.set(w.name, (totals.get(w.name) || 0) + w.waited_ms_per_s);
        const names = [...totals.entries()].sort(function (a, b) { return b[1] - a[1]; })
          .slice(0, 6).map(function (entry) { return entry[0]; });
        return {
          labels: names,
          columns: names.map(function (name) {
            return s.map(function (x) {
              if (!x.role) return null;
              const w = x.waits.find(function (w) { return w.name === name; });
              // (No wait is a gap on the log scale, not a zero.)
              return w && w.waited_ms_per_s > 0 ? w.waited_ms_per_s : null;
            });
          }),
        };
      }
    }
    return { labels: [], columns: [] };
  }

  function makeChart(name, section, labels) {
    const plot = section.querySelector('.plot');
    plot.replaceChildren();
    const series = [{ label: 'time', value: '{HH}:{mm}:{ss}' }];
    labels.forEach(function (label, index) {
      // A standby's two lags share its colour: transport solid, apply dashed.
      const color = PALETTE[(name === 'lags' ? Math.floor(index / 2) : index) % PALETTE.length];
      series.push({
        label: label,
        stroke: color,
        width: 2,
        dash: name === 'lags' && label.endsWith(' apply') ? [6, 4] : undefined,
        fill: (name === 'redo' || name === 'commits') && index === 0 ? color + '22' : undefined,
        spanGaps: false,
        points: { show: false },
        value: function (u, v) { return v === null || v === undefined ? '-' : v.toFixed(v < 10 ? 3 : 1); },
      });
    });
    const axis = { stroke: '#8793a1', grid: { stroke: '#2a323c', width: 1 }, ticks: { stroke: '#2a323c' } };
    // Latencies and waits span decades (a p50 of 1 ms beside a p99 of 20 ms; one event taking
    // most of the time): a log scale keeps each readable.
    const logarithmic = name === 'latency' || name === 'waits';
    const y = logarithmic
      ? { distr: 3, log: 10 }
      : { range: function (u, min, max) { return [0, Math.max(max || 0, name === 'lags' ? 0.01 : 1e-6) * 1.1]; } };
    const options = {
      width: Math.max(300, plot.clientWidth),
      height: name === 'waits' ? 220 : 200,
      series: series,
      scales: { x: { time: true }, y: y },
      // Whole seconds on the time axis, however wide the chart and short the history.
      axes: [Object.assign({ space: 60, incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300] }, axis),
        Object.assign({ size: 60 }, axis)],
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      plugins: name === 'lags' ? [logSwitchMarks(), thresholdLine()] : [logSwitchMarks()],
    };
    return new uPlot(options, [[]].concat(labels.map(function () { return []; })), plot);
  }

  function renderCharts() {
    const xs = view.samples.map(function (x) { return x.t_ms / 1000; });
    for (const section of document.querySelectorAll('.chart')) {
      const name = section.dataset.chart;
      const data = chartData(name);
      const key = data.labels.join('|');
      let chart = charts[name];
      if (!chart || chart.key !== key) {
        if (chart) chart.plot.destroy();
        chart = charts[name] = { key: key, plot: makeChart(name, section, data.labels) };
      }
      chart.plot.setData([xs].concat(data.columns));
      // The legend shows the newest values unless the pointer is on the chart.
      if (!section.matches(':hover') && xs.length) chart.plot.setLegend({ idx: xs.length - 1 });
      // What the chart holds, for a person's tools and for the tests.
      let points = 0, last = null, max = null;
      for (const column of data.columns) {
        for (const value of column) {
          if (value === null || value === undefined) continue;
          points += 1;
          if (max === null || value > max) max = value;
        }
        const tail = column.length ? column[column.length - 1] : null;
        if (tail !== null && tail !== undefined && (last === null || tail > last)) last = tail;
      }
      section.dataset.points = String(points);
      section.dataset.series = String(data.columns.length);
      section.dataset.last = last === null ? '' : String(last);
      section.dataset.max = max === null ? '' : String(max);
    }
  }

  function render() {
    renderConfiguration();
    renderSwitchWaits();
    renderCharts();
    const updated = document.getElementById('updated');
    updated.classList.remove('stale');
    const newest = view.samples.length ? new Date(view.samples[view.samples.length - 1].t_ms) : new Date();
    updated.textContent = 'updated ' + newest.toLocaleTimeString() + ' · ' + view.samples.length + ' s of history';
    document.body.dataset.samples = String(view.samples.length);
  }

  window.addEventListener('resize', function () {
    for (const name of Object.keys(charts)) {
      const plot = document.querySelector('.chart[data-chart="' + name + '"] .plot');
      charts[name].plot.setSize({ width: Math.max(300, plot.clientWidth), height: charts[name].plot.height });
    }
  });

  tick();
})();
