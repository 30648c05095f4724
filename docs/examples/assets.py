"""Assets: a producer's success updates an asset; DAGs scheduled on assets run when what
they wait for has been updated, and read the events that started them."""

from datetime import datetime

from tailrace import Asset, AssetAlias, asset, dag, task

orders = Asset("s3://shop/orders.csv", extra={"owner": "sales"})
rates = Asset(name="fx_rates", uri="https://rates.example.com/daily.json")


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def load_orders():
    @task(outlets=[orders])
    def write(*, outlet_events):
        rows = 120  # ... write the file ...
        outlet_events[orders].extra = {"rows": rows}

    write()


load_orders()


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def load_rates():
    @task(outlets=[rates])
    def fetch():
        return "EUR"

    fetch()


load_rates()


@dag(schedule=orders & rates)
def revenue():
    @task(inlets=[orders])
    def report(*, triggering_asset_events, inlet_events):
        started_by = triggering_asset_events.get(orders, [])
        rows = sum(event.extra.get("rows", 0) for event in started_by)
        latest = inlet_events[orders][-1].extra if len(inlet_events[orders]) else {}
        return {"new_rows": rows, "latest": latest}

    report()


revenue()


@dag(schedule=orders | rates)
def refresh_dashboard():
    @task
    def refresh():
        return "refreshed"

    refresh()


refresh_dashboard()


@dag(schedule=None, start_date=datetime(2026, 1, 1))
def export_partition():
    @task(outlets=[AssetAlias("partitions")])
    def export(*, outlet_events, ds):
        # Which asset is updated is known only now: the alias resolves to it.
        outlet_events[AssetAlias("partitions")].add(
            Asset(f"s3://shop/partitions/{ds}.parquet"), extra={"day": ds}
        )

    export()


export_partition()


@dag(schedule=AssetAlias("partitions"))
def compact_partitions():
    @task
    def compact(*, triggering_asset_events):
        return sorted(a.uri for a in triggering_asset_events)

    compact()


compact_partitions()


@asset(schedule=orders)
def order_summary(self, context):
    """A DAG of one task whose success updates the asset ``order_summary``."""
    return f"{self.name} built in run {context['run_id']}"
